/**
 * The layering rules fail lint when broken: small snippets placed (by name
 * only) in each layer are linted through ESLint's API with the project's own
 * eslint.config.js, and a pair of files that import each other with the cycle
 * rule eslint-layers.js gives it. Each refused import has an allowed twin, so
 * a rule that refused everything would fail here too.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ESLint, type Linter } from 'eslint';

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
  assert.deepEqual(
    result.messages.filter((m) => m.ruleId !== 'import-x/no-restricted-paths').map((m) => m.message),
    [],
    'the snippet itself must lint clean',
  );
  return result.messages.map((m) => m.message);
}

const DISPATCHER = "import { Dispatcher } from '{up}dispatcher/dispatcher.js';\nexport const x = Dispatcher;\n";
const EXECUTOR = "import type { Backend } from '{up}executor/backend.js';\nexport type X = Backend;\n";
const COMMON = "import { BerthError } from '{up}common/errors.js';\nexport const x = BerthError;\n";
const GEN = "import { ExecRequest } from '{up}gen/berth/v1/executor.js';\nexport const x = ExecRequest;\n";
const CLI = "import { main } from '{up}cli/main.js';\nexport const x = main;\n";
const TEST = "import { it } from '{up}../test/unit/layering.test.js';\nexport const x = it;\n";

/** A snippet importing `what` from a file one folder below services/ (so `../` reaches services/). */
function from(what: string, up = '../'): string {
  return what.replaceAll('{up}', up);
}

void describe('layering lint rules', () => {
  void it('common imports gen but nothing above it', async () => {
    assert.deepEqual(await layerErrors('services/common/probe.ts', from(GEN)), []);
    for (const upward of [DISPATCHER, EXECUTOR, CLI]) {
      const errors = await layerErrors('services/common/probe.ts', from(upward));
      assert.equal(errors.length, 1, upward);
      assert.match(errors[0] ?? '', /The common layer imports only gen/);
    }
  });

  void it('dispatcher and executor import common and gen, never each other, never the cli', async () => {
    assert.deepEqual(await layerErrors('services/dispatcher/probe.ts', from(COMMON) + from(GEN).replace('const x', 'const y')), []);
    assert.deepEqual(await layerErrors('services/executor/probe.ts', from(COMMON)), []);
    assert.match((await layerErrors('services/dispatcher/tools/probe.ts', from(EXECUTOR, '../../'))).join(), /The dispatcher layer imports only common, gen/);
    assert.match((await layerErrors('services/executor/backends/probe.ts', from(DISPATCHER, '../../'))).join(), /The executor layer imports only common, gen/);
    assert.equal((await layerErrors('services/dispatcher/probe.ts', from(CLI))).length, 1);
    assert.equal((await layerErrors('services/executor/probe.ts', from(CLI))).length, 1);
  });

  void it('the cli may import every layer below it', async () => {
    for (const below of [DISPATCHER, EXECUTOR, COMMON, GEN]) {
      assert.deepEqual(await layerErrors('services/cli/probe.ts', from(below)), [], below);
    }
  });

  void it('the client imports only common and gen; its build-time codegen may read the dispatcher', async () => {
    assert.deepEqual(await layerErrors('services/client/probe.ts', from(COMMON)), []);
    assert.match((await layerErrors('services/client/probe.ts', from(DISPATCHER))).join(), /The client layer imports only common, gen/);
    assert.equal((await layerErrors('services/client/generated/probe.ts', from(EXECUTOR, '../../'))).length, 1);
    assert.deepEqual(await layerErrors('services/client/codegen/probe.ts', from(DISPATCHER, '../../')), []);
    assert.equal((await layerErrors('services/client/codegen/probe.ts', from(EXECUTOR, '../../'))).length, 1);
  });

  void it('the public backend kit re-exports the backend contract and the kit, nothing else of the executor', async () => {
    const file = 'services/backend-kit/probe.ts';
    assert.deepEqual(await layerErrors(file, "export { taskKeyString } from '../executor/backend.js';\n"), []);
    assert.deepEqual(await layerErrors(file, "export { assertAbsolute } from '../executor/backends/shared/guards.js';\n"), []);
    assert.deepEqual(await layerErrors(file, from(COMMON)), []);
    assert.match(
      (await layerErrors(file, "export { TaskEnvironments } from '../executor/task-environment.js';\n")).join(),
      /The public backend kit re-exports only executor\/backend.ts and backends\/shared\//,
    );
    assert.match(
      (await layerErrors(file, "export { LocalBackend } from '../executor/backends/local/local-backend.js';\n")).join(),
      /The public backend kit re-exports only/,
    );
    assert.match((await layerErrors(file, from(DISPATCHER))).join(), /The backend kit layer imports only executor, common/);
  });

  void it('the conformance suite may drive the executor and the dispatcher, never the cli', async () => {
    for (const below of [DISPATCHER, EXECUTOR, COMMON]) {
      assert.deepEqual(await layerErrors('services/conformance/probe.ts', from(below)), [], below);
    }
    assert.match((await layerErrors('services/conformance/probe.ts', from(CLI))).join(), /The conformance layer imports only/);
  });

  void it('an example imports no file of Berth: only the package exports', async () => {
    const file = 'examples/backend-plugin/src/probe.ts';
    assert.match(
      (await layerErrors(file, "export { taskKeyString } from '../../../services/backend-kit/index.js';\n")).join(),
      /The examples layer imports only nothing of Berth/,
    );
    assert.match((await layerErrors(file, from(EXECUTOR, '../../../services/'))).join(), /The examples layer/);
  });

  void it('no product code imports test/, while tests import any layer', async () => {
    for (const layer of ['common', 'dispatcher', 'executor', 'cli', 'client', 'backend-kit', 'conformance']) {
      assert.equal((await layerErrors(`services/${layer}/probe.ts`, from(TEST))).length, 1, layer);
    }
    assert.deepEqual(await layerErrors('test/unit/probe.ts', from(DISPATCHER, '../../services/')), []);
  });
});

void describe('a finer rule inside a layer', () => {
  void it('is one entry of inner rules, with its exceptions', async () => {
    const layers = (await import(pathToFileURL(path.join(root, 'eslint-layers.js')).href)) as {
      layeringConfig: (options: { innerRules: object[] }) => Linter.Config[];
    };
    const innerRules = [
      {
        target: 'services/dispatcher/tools/web',
        from: 'services/dispatcher/tools',
        except: ['services/dispatcher/tools/web', 'services/dispatcher/tools/python-type-name.ts'],
        message: 'The web tools import no other tool.',
      },
    ];
    const linter = new ESLint({
      cwd: root,
      overrideConfigFile: true,
      overrideConfig: layers.layeringConfig({ innerRules }),
      ruleFilter: ({ ruleId }) => ruleId === 'import-x/no-restricted-paths',
    });
    const errors = async (code: string): Promise<string[]> => {
      const [result] = await linter.lintText(code, { filePath: path.join(root, 'services/dispatcher/tools/web/probe.ts') });
      return (result?.messages ?? []).map((m) => m.message);
    };
    assert.match(
      (await errors("import { CODE_ARGUMENT_ERROR } from '../terminal/terminal-tool.js';\nexport const x = CODE_ARGUMENT_ERROR;\n")).join(),
      /The web tools import no other tool/,
    );
    assert.deepEqual(await errors("import { pythonTypeName } from '../python-type-name.js';\nexport const x = pythonTypeName;\n"), []);
    assert.deepEqual(await errors("import { DEFAULT_SEARCH_LIMIT } from './web-tools.js';\nexport const x = DEFAULT_SEARCH_LIMIT;\n"), []);
    // The layers still apply beside it.
    assert.match((await errors(from(EXECUTOR, '../../../'))).join(), /The dispatcher layer imports only common, gen/);
  });
});

void describe('import cycle rule', () => {
  const scratch = mkdtempSync(path.join(tmpdir(), 'berth-layering-'));
  after(() => rmSync(scratch, { recursive: true, force: true }));

  void it('is on for every TypeScript file of the project', async () => {
    for (const file of ['services/common/errors.ts', 'services/dispatcher/dispatcher.ts', 'test/unit/layering.test.ts']) {
      const config = (await eslint.calculateConfigForFile(path.join(root, file))) as Linter.Config;
      const rule = config.rules?.['import-x/no-cycle'];
      assert.equal(Array.isArray(rule) ? rule[0] : rule, 2, file);
    }
  });

  void it('refuses two files that import each other, compiled-style .js specifiers included', async () => {
    writeFileSync(path.join(scratch, 'a.ts'), "import { b } from './b.js';\nexport const a = (): number => b() + 1;\n");
    writeFileSync(path.join(scratch, 'b.ts'), "import { a } from './a.js';\nexport const b = (): number => a() - 1;\n");
    writeFileSync(path.join(scratch, 'c.ts'), "import { a } from './a.js';\nexport const c = a;\n");
    const layers = (await import(pathToFileURL(path.join(root, 'eslint-layers.js')).href)) as {
      layeringConfig: () => Linter.Config[];
    };
    const linter = new ESLint({ cwd: scratch, overrideConfigFile: true, overrideConfig: layers.layeringConfig() });
    const results = await linter.lintFiles(['*.ts']);
    const cycles = Object.fromEntries(
      results.map((r) => [path.basename(r.filePath), r.messages.filter((m) => m.ruleId === 'import-x/no-cycle').length]),
    );
    assert.deepEqual(cycles, { 'a.ts': 1, 'b.ts': 1, 'c.ts': 0 });
  });
});
