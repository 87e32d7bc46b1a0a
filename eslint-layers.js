// The layering of services/, enforced by lint: imports point down
// (cli -> dispatcher | executor -> common -> gen), dispatcher and executor
// never import each other, the client imports only common and gen, the
// public backend kit re-exports only the backend contract and the kit, the
// examples import nothing of Berth but its public package exports, no
// product code imports test/, and no import cycle anywhere. eslint.config.js
// uses this; test/unit/layering.test.ts proves each rule fails when broken.
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { createNodeResolver, importX } from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';

const root = import.meta.dirname;

/**
 * Each layer: the files it holds (a folder, or globs for a layer that leaves
 * out a subfolder) and the layers it may import. An import of any other
 * layer's file, or of test/, is an error. Layers do not overlap; a finer rule
 * inside one goes in INNER_RULES.
 */
export const LAYERS = [
  { name: 'gen', files: ['services/gen'], mayImport: [] },
  { name: 'common', files: ['services/common'], mayImport: ['gen'] },
  { name: 'dispatcher', files: ['services/dispatcher'], mayImport: ['common', 'gen'] },
  { name: 'executor', files: ['services/executor'], mayImport: ['common', 'gen'] },
  {
    name: 'client',
    files: ['services/client/*.ts', 'services/client/!(codegen)/**'],
    mayImport: ['common', 'gen'],
  },
  // Generates the client's typed tool methods at build time from the dispatcher's registry.
  { name: 'client codegen', files: ['services/client/codegen'], mayImport: ['client', 'dispatcher', 'common', 'gen'] },
  // The compose stack's TCP balancer.
  { name: 'deploy', files: ['services/deploy'], mayImport: ['common', 'gen'] },
  // berth/backend-kit: the backend contract and the kit, re-exported (an inner rule narrows it to those files).
  { name: 'backend kit', files: ['services/backend-kit'], mayImport: ['executor', 'common'] },
  // berth/conformance: drives a backend as the executor does, and the dispatcher's file tools on it.
  { name: 'conformance', files: ['services/conformance'], mayImport: ['dispatcher', 'executor', 'common', 'gen'] },
  // Example packages: built on the package's exports (berth/backend-kit), never on its files.
  { name: 'examples', files: ['examples'], mayImport: [] },
  { name: 'cli', files: ['services/cli'], mayImport: ['dispatcher', 'executor', 'client', 'client codegen', 'common', 'gen', 'deploy'] },
];

/**
 * Finer rules inside a layer, as import-x/no-restricted-paths zones with
 * folder or file paths relative to the repository: `target` the importing
 * files, `from` what they may not import, `except` what inside `from` they
 * may import after all. For example, a backend that may import only the
 * executor's backend.ts, the shared kit and its own folder:
 *
 *   { target: 'services/executor/backends/docker', from: 'services/executor',
 *     except: ['services/executor/backend.ts', 'services/executor/backends/shared',
 *              'services/executor/backends/docker'],
 *     message: 'A backend imports only backend.ts, backends/shared and common.' }
 */
export const INNER_RULES = executorRules();

/**
 * The executor's own layers: a backend (a folder under backends/) imports
 * only backend.ts, the kit (backends/shared/) and its own folder of the
 * executor; the kit only backend.ts and itself; the executor core (its
 * files outside backends/) no backend folder, only the kit and the loader
 * table backends/create-backend.ts, which alone names the backends; the
 * public backend kit (services/backend-kit/) only backend.ts and the kit.
 * Common and gen are the executor layer's already.
 */
function executorRules() {
  const executor = 'services/executor';
  const backends = `${executor}/backends`;
  const kit = `${backends}/shared`;
  const contract = `${executor}/backend.ts`;
  const names = readdirSync(path.join(root, backends), { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && entry.name !== 'shared')
    .map((entry) => entry.name);
  return [
    ...names.map((name) => ({
      target: `${backends}/${name}`,
      from: executor,
      except: [contract, kit, `${backends}/${name}`],
      message: `The ${name} backend imports only executor/backend.ts, backends/shared/ and its own folder of the executor: move what it needs down into the kit or common.`,
    })),
    {
      target: kit,
      from: executor,
      except: [contract, kit],
      message: 'The backend kit (backends/shared/) imports only executor/backend.ts and itself of the executor.',
    },
    {
      target: 'services/backend-kit',
      from: executor,
      except: [contract, kit],
      message: 'The public backend kit re-exports only executor/backend.ts and backends/shared/ of the executor: its names are semver-stable.',
    },
    {
      target: [`${executor}/*.ts`, `${executor}/!(backends)/**`],
      from: backends,
      except: [kit, `${backends}/create-backend.ts`],
      message:
        'The executor core names no backend: declare what it needs in executor/backend.ts and reach backends through backends/create-backend.ts.',
    },
  ];
}

/** Folders no product code imports. */
const TEST_FOLDERS = ['test'];

/** A zone of no-restricted-paths takes a folder path or globs, never both: a folder becomes a glob of its files. */
function asGlobs(files) {
  return files.map((entry) => (/[*?!(]/.test(entry) ? entry : `${entry}/**`));
}

/** The no-restricted-paths zones for a list of layers: each layer refused every layer it may not import, and test/. */
export function layerZones(layers) {
  return layers.map((layer) => {
    const refused = layers.filter((other) => other !== layer && !layer.mayImport.includes(other.name));
    return {
      target: asGlobs(layer.files),
      from: [...refused.flatMap((other) => asGlobs(other.files)), ...TEST_FOLDERS.map((folder) => `${folder}/**`)],
      message:
        `The ${layer.name} layer imports only ${layer.mayImport.length > 0 ? layer.mayImport.join(', ') : 'nothing of Berth'}` +
        ' (the layers: eslint-layers.js, docs/development.md#layout).',
    };
  });
}

/** How imports are resolved for the layer and cycle rules: the `.js` of a compiled import is its `.ts` source. */
const importResolution = {
  plugins: { 'import-x': importX },
  languageOptions: { parser: tseslint.parser },
  settings: {
    'import-x/extensions': ['.ts', '.js', '.mjs', '.cjs'],
    'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
    'import-x/resolver-next': [
      createNodeResolver({ extensions: ['.ts', '.js', '.json', '.node'], extensionAlias: { '.js': ['.ts', '.js'] } }),
    ],
  },
};

/** An inner rule with its `except` paths made absolute, as the rule matches them against resolved imports. */
function innerZone({ except, ...zone }) {
  return except === undefined ? zone : { ...zone, except: except.map((entry) => path.resolve(root, entry)) };
}

/** Flat-config entries for the TypeScript files under `files`: no cycles, the layers, the inner rules. */
export function layeringConfig({ files = ['**/*.ts'], layers = LAYERS, innerRules = INNER_RULES } = {}) {
  return [
    { files, ...importResolution },
    {
      files,
      rules: {
        'import-x/no-cycle': 'error',
        'import-x/no-restricted-paths': [
          'error',
          { basePath: root, zones: [...layerZones(layers), ...innerRules.map(innerZone)] },
        ],
      },
    },
  ];
}
