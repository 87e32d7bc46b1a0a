/**
 * The executor's own layers (the executor rules of eslint-layers.js's
 * INNER_RULES) fail lint when broken: snippets placed (by name only) in a
 * backend folder, the kit and the executor core are linted through ESLint's
 * API with the project's own eslint.config.js. Each refused import has an
 * allowed twin, so a rule that refused everything would fail here too.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** The project's config, minus type information (the snippets are not files the TypeScript project knows). */
const eslint = new ESLint({
  cwd: root,
  overrideConfig: { languageOptions: { parserOptions: { projectService: false } } },
  ruleFilter: ({ ruleId }) => ruleId === 'import-x/no-restricted-paths',
});

/** The layer-rule messages for `code` as if it were the file at `file` (relative to the repository). */
async function layerErrors(file: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: path.join(root, file) });
  assert.ok(result !== undefined);
  return result.messages.map((m) => m.message);
}

/** `import { NAME } from 'SPECIFIER'` and a use of it. */
const importing = (name: string, specifier: string) => `import { ${name} } from '${specifier}';\nexport const used = ${name};\n`;

void describe("the executor's layers", () => {
  void it("a backend imports backend.ts, the kit, common and its own folder, but no other backend's folder and no executor core file", async () => {
    const file = 'services/executor/backends/ssh/probe.ts';
    for (const allowed of [
      importing('taskKeyString', '../../backend.js'),
      importing('assertAbsolute', '../shared/guards.js'),
      importing('BerthError', '../../../common/errors.js'),
      importing('SshConnection', './ssh-connection.js'),
    ]) {
      assert.deepEqual(await layerErrors(file, allowed), [], allowed);
    }
    for (const refused of [
      importing('DockerBackend', '../docker/docker-backend.js'),
      importing('truncateOutput', '../../output.js'),
      importing('ShellStateRunner', '../../shell-state/shell-state-runner.js'),
    ]) {
      assert.match((await layerErrors(file, refused)).join(), /The ssh backend imports only executor\/backend.ts, backends\/shared\//, refused);
    }
  });

  void it('every backend folder is held to it, however it is reached (a dynamic import too)', async () => {
    const errors = await layerErrors(
      'services/executor/backends/modal/probe.ts',
      "export const load = () => import('../daytona/daytona-backend.js');\n",
    );
    assert.match(errors.join(), /The modal backend imports only/);
  });

  void it('the kit imports backend.ts and itself, never a backend', async () => {
    assert.deepEqual(await layerErrors('services/executor/backends/shared/probe.ts', importing('taskKeyString', '../../backend.js')), []);
    assert.match(
      (await layerErrors('services/executor/backends/shared/agent/probe.ts', importing('sandboxName', '../../modal/modal-backend.js'))).join(),
      /The backend kit \(backends\/shared\/\) imports only/,
    );
  });

  void it('the executor core names no backend: only the kit and the loader table', async () => {
    for (const file of ['services/executor/probe.ts', 'services/executor/code-execution/probe.ts']) {
      const up = file.split('/').length === 3 ? './' : '../';
      assert.deepEqual(await layerErrors(file, importing('createBackend', `${up}backends/create-backend.js`)), [], file);
      assert.deepEqual(await layerErrors(file, importing('withoutProviderSecrets', `${up}backends/shared/secret-names.js`)), [], file);
      assert.match(
        (await layerErrors(file, importing('dockerOptionsFromConfig', `${up}backends/docker/docker-options.js`))).join(),
        /The executor core names no backend/,
        file,
      );
    }
  });

  void it('the loader table may name every backend', async () => {
    assert.deepEqual(
      await layerErrors('services/executor/backends/create-backend.ts', "export const load = () => import('./docker/create-docker-backend.js');\n"),
      [],
    );
  });
});
