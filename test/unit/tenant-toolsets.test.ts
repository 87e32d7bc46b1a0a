/**
 * `tenants[].toolsets`: which tools the names resolve to (toolsets, legacy
 * names, aliases), unknown names stopping the start, and the dispatcher
 * listing and refusing accordingly before any placement, quota or executor
 * work. The end-to-end run through `berth serve` is
 * test/isolation/toolsets.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, hashApiKey } from '../../services/common/config.js';
import { parseConfig } from '../../services/common/config-load.js';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskClient, TaskCodeRunRequest } from '../../services/common/task-client.js';
import {
  executeCodeLimitsFromConfig,
  executeCodeSchemaPatcher,
  executeCodeToolRegistration,
} from '../../services/dispatcher/tools/code-execution/execute-code-tool.js';
import { Dispatcher } from '../../services/dispatcher/dispatcher.js';
import type { ExecutorRouter } from '../../services/dispatcher/executors/executor-router.js';
import { ToolRegistry } from '../../services/dispatcher/registry/registry.js';
import { TenantDirectory } from '../../services/dispatcher/tenants.js';
import { registerBuiltinTools } from '../../services/dispatcher/tools/builtin-tools.js';
import type { ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import {
  SANDBOX_TOOLS,
  registerToolset,
  resolveToolsets,
  selectToolNames,
  unregisterToolset,
} from '../../services/dispatcher/registry/toolsets.js';

const FILE_TOOLS = ['patch', 'read_file', 'search_files', 'write_file'];

function directory(toolsets: Record<string, readonly string[] | undefined>): TenantDirectory {
  return new TenantDirectory(
    parseConfig({
      allow_local_multi_tenant: true,
      tenants: Object.entries(toolsets).map(([id, names]) => ({
        id,
        api_key_sha256: hashApiKey(`${id}-key`),
        ...(names ? { toolsets: names } : {}),
      })),
    }),
  );
}

void describe('resolveToolsets', () => {
  it('resolves toolset names to their tools, includes expanded', () => {
    assert.deepEqual([...resolveToolsets(['file']).tools].sort(), FILE_TOOLS);
    assert.deepEqual([...resolveToolsets(['terminal']).tools].sort(), ['process_manage', 'terminal']);
    assert.deepEqual([...resolveToolsets(['file', 'code_execution']).tools].sort(), ['execute_code', ...FILE_TOOLS].sort());
    assert.deepEqual(
      [...resolveToolsets(['debugging']).tools].sort(),
      [...FILE_TOOLS, 'process_manage', 'terminal', 'web_extract', 'web_search'].sort(),
    );
  });

  it('resolves legacy toolset names to the current tool names', () => {
    assert.deepEqual([...resolveToolsets(['file_tools']).tools].sort(), FILE_TOOLS);
    assert.deepEqual([...resolveToolsets(['terminal_tools']).tools].sort(), ['process_manage', 'terminal']);
    assert.deepEqual([...resolveToolsets(['cronjob_tools']).tools], ['cronjob_manage']);
  });

  it('resolves a plugin toolset alias and its legacy tool names (process → process_manage)', () => {
    try {
      registerToolset('mcp-ops', { description: 'ops', tools: ['process', 'ops_status'] });
      assert.deepEqual([...resolveToolsets(['ops']).tools].sort(), ['ops_status', 'process_manage']);
    } finally {
      unregisterToolset('mcp-ops');
    }
  });

  it('reports unknown names once each, in order; they allow nothing; an empty list allows nothing', () => {
    assert.deepEqual(resolveToolsets(['nope', 'file', 'process', 'nope', 'Files']), {
      tools: new Set(FILE_TOOLS),
      unknown: ['nope', 'process', 'Files'],
    });
    assert.deepEqual(resolveToolsets([]), { tools: new Set(), unknown: [] });
  });
});

void describe('selectToolNames within a tenant scope', () => {
  const scope = new Set(['execute_code', ...FILE_TOOLS]);

  it('a client selection narrows the scope and never widens it', () => {
    assert.deepEqual(selectToolNames({ within: scope }).names, ['execute_code', ...FILE_TOOLS].sort());
    assert.deepEqual(selectToolNames({ enabled: ['terminal', 'file'], within: scope }).names, FILE_TOOLS);
    assert.deepEqual(selectToolNames({ enabled: ['terminal'], within: scope }).names, []);
    assert.deepEqual(selectToolNames({ disabled: ['file'], within: scope }).names, ['execute_code']);
  });
});

void describe('TenantDirectory toolsets', () => {
  it('gives the resolved tools of a tenant with toolsets, and nothing (every tool) without the key', () => {
    const d = directory({ acme: ['file_tools', 'code_execution'], globex: undefined, initech: [] });
    assert.deepEqual([...(d.toolsFor('acme') ?? [])].sort(), ['execute_code', ...FILE_TOOLS].sort());
    assert.equal(d.toolsFor('globex'), undefined);
    assert.deepEqual(d.toolsFor('initech'), new Set());
  });

  it('rejects unknown toolset names at start, naming the tenant, the name and the known names', () => {
    assert.throws(
      () => directory({ acme: ['file', 'terminals'], globex: ['process'] }),
      (err: Error) => {
        assert.ok(err instanceof ConfigError);
        assert.match(err.message, /^invalid config:\n✖ tenants\[acme\]\.toolsets: unknown toolset 'terminals'\n/);
        assert.match(err.message, /\n✖ tenants\[globex\]\.toolsets: unknown toolset 'process'\n/);
        assert.match(err.message, /known toolset names: .*\bcode_execution, .*\bterminal, .*\bfile_tools\b/);
        return true;
      },
    );
  });
});

/** A router that records placements and then fails: a refused call must never get here. */
function recordingRouter(): { router: ExecutorRouter; placed: string[] } {
  const placed: string[] = [];
  const router = {
    place: (tenant: string, taskId: string) => {
      placed.push(`${tenant}/${taskId}`);
      return Promise.reject(new Error('placed'));
    },
  } as unknown as ExecutorRouter;
  return { router, placed };
}

function dispatcherFor(toolsets: Record<string, readonly string[] | undefined>) {
  const tenants = directory(toolsets);
  const registry = new ToolRegistry({ logger: silentLogger() });
  registerBuiltinTools(registry, parseConfig({}));
  const { router, placed } = recordingRouter();
  const dispatcher = new Dispatcher({
    registry,
    router,
    terminal: parseConfig({}).terminal,
    logger: silentLogger(),
    executeCodeSchema: executeCodeSchemaPatcher(executeCodeLimitsFromConfig(parseConfig({}))),
    tenantTools: (tenant) => tenants.toolsFor(tenant),
  });
  return { dispatcher, placed };
}

const call = (name: string) => ({ name, argumentsJson: '{"command":"id"}', taskId: 't1', sessionId: '' });

void describe('Dispatcher with tenant toolsets', () => {
  it('lists only the tenant\'s tools; the client narrows further', async () => {
    const { dispatcher } = dispatcherFor({ acme: ['file'], globex: undefined });
    const names = async (tenant: string, enabled: string[] = []) =>
      (await dispatcher.listTools(tenant, enabled, [])).tools.map((t) => t.function.name).sort();
    assert.deepEqual(await names('acme'), FILE_TOOLS);
    assert.deepEqual(await names('acme', ['terminal', 'read_file_tools_nope', 'file_tools']), FILE_TOOLS);
    assert.deepEqual(await names('acme', ['terminal']), []);
    assert.ok((await names('globex')).includes('terminal'));
  });

  it('the execute_code schema lists only the tenant\'s sandbox tools', async () => {
    const { dispatcher } = dispatcherFor({ acme: ['file', 'code_execution'] });
    const { tools } = await dispatcher.listTools('acme', [], []);
    const executeCode = tools.find((t) => t.function.name === 'execute_code');
    assert.ok(executeCode);
    assert.match(executeCode.function.description, /from hermes_tools import \.\.\.`: read_file\(/);
    assert.doesNotMatch(executeCode.function.description, /terminal\(command/);
  });

  it('refuses tools outside the toolsets as unknown, before placing the task; others go on', async () => {
    const { dispatcher, placed } = dispatcherFor({ acme: ['file'], globex: undefined });
    const signal = new AbortController().signal;
    for (const [sent, answer] of [
      ['terminal', 'terminal'],
      ['process', 'process_manage'],
      ['process_manage', 'process_manage'],
      ['execute_code', 'execute_code'],
      ['no_such_tool', 'no_such_tool'],
    ] as const) {
      assert.equal(await dispatcher.callTool('acme', call(sent), { signal }), JSON.stringify({ error: `Unknown tool: ${answer}` }));
    }
    assert.deepEqual(placed, [], 'no refused call reached placement (quotas, approvals and executors come after it)');
    await assert.rejects(dispatcher.callTool('acme', call('read_file'), { signal }), /placed/);
    await assert.rejects(dispatcher.callTool('globex', call('terminal'), { signal }), /placed/);
    assert.deepEqual(placed, ['acme/t1', 'globex/t1']);
  });

  it('narrows the explain report to the tenant\'s tools', async () => {
    const { dispatcher } = dispatcherFor({ acme: ['file', 'web'] });
    const report = await dispatcher.availabilityReport('acme');
    assert.deepEqual(report.available, ['file']);
    assert.deepEqual(report.unavailable.map((u) => u.name), ['web']);
    assert.ok(report.unavailable_tools.every((t) => t.toolset === 'web'));
    assert.ok((await dispatcher.availabilityReport()).available.includes('terminal'));
  });
});

void describe('tool scope inside a call', () => {
  function context(allowedTools: ReadonlySet<string> | undefined, task: TaskClient = {} as TaskClient): ToolContext {
    return {
      tenant: 'acme',
      taskId: 't1',
      sessionId: '',
      task,
      signal: new AbortController().signal,
      logger: silentLogger(),
      ...(allowedTools ? { allowedTools } : {}),
    };
  }

  it('the registry answers a tool outside context.allowedTools as unknown', async () => {
    const registry = new ToolRegistry({ logger: silentLogger() });
    registerBuiltinTools(registry, parseConfig({}));
    const scope = new Set(FILE_TOOLS);
    assert.equal(await registry.dispatch('terminal', { command: 'id' }, context(scope)), '{"error":"Unknown tool: terminal"}');
    assert.equal(await registry.dispatch('process', { action: 'list' }, context(scope)), '{"error":"Unknown tool: process_manage"}');
  });

  it('execute_code gives a script stubs for the tenant\'s tools only and refuses the others', async () => {
    let request: TaskCodeRunRequest | undefined;
    const answers: string[] = [];
    const dispatched: string[] = [];
    const task = {
      runCode: async (r: TaskCodeRunRequest) => {
        request = r;
        answers.push(await r.onToolCall({ tool: 'terminal', argsJson: '{"command":"id"}' }));
        answers.push(await r.onToolCall({ tool: 'read_file', argsJson: '{"path":"a"}' }));
        return { stdout: '', stderr: '', exitCode: 0, timedOut: false, interrupted: false, ranIn: 'test', interpreter: 'python3', notices: [] };
      },
    } as unknown as TaskClient;
    const registration = executeCodeToolRegistration({
      mode: 'project',
      timeoutSec: 10,
      maxToolCalls: 5,
      maxStdoutBytes: 1000,
      maxStderrBytes: 1000,
      envPassthrough: [],
      credentialEnv: [],
      allowHostSubprocess: true,
      availableTools: () => Promise.resolve(SANDBOX_TOOLS),
      dispatch: (name) => {
        dispatched.push(name);
        return Promise.resolve('{"content":"ok"}');
      },
    });
    await registration.handler({ code: 'print(1)' }, context(new Set(['execute_code', ...FILE_TOOLS]), task));
    assert.ok(request);
    assert.deepEqual(request.allowedTools, ['read_file', 'write_file', 'search_files', 'patch']);
    assert.doesNotMatch(request.stubModule, /def terminal\(/);
    assert.match(request.stubModule, /def read_file\(/);
    assert.deepEqual(answers, [
      JSON.stringify({ error: "Tool 'terminal' is not available in execute_code. Available: patch, read_file, search_files, write_file" }),
      '{"content":"ok"}',
    ]);
    assert.deepEqual(dispatched, ['read_file']);
  });
});
