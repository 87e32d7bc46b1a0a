// Lint runs with type information so promise and import rules can see types.
import tseslint from 'typescript-eslint';
import { layeringConfig } from './eslint-layers.js';

export default tseslint.config(
  { ignores: ['dist/**', 'examples/*/dist/**', 'node_modules/**', 'services/gen/**', 'eslint.config.js', 'eslint-layers.js'] },
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          // node:test's describe/test return promises the runner itself awaits.
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['describe', 'test', 'it', 'suite'] },
          ],
        },
      ],
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-console': 'error',
    },
  },
  {
    files: ['test/**/*.ts', 'services/cli/**/*.ts'],
    rules: { 'no-console': 'off' },
  },
  // No import cycles, and the layers of services/ (eslint-layers.js).
  ...layeringConfig(),
);
