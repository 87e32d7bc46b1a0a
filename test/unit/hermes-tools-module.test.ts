/**
 * The generated hermes_tools module and the execute_code schema. The module
 * is imported by a real python3 talking to a real Unix socket served here, so
 * the wire format is checked from the script's side.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import {
  buildExecuteCodeSchema,
  buildHermesToolsModule,
  describeLimits,
  stubSignature,
} from '../../services/dispatcher/tools/code-execution/hermes-tools-module.js';
import { executeCodeSchemaPatcher } from '../../services/dispatcher/tools/code-execution/execute-code-tool.js';
import { ToolRegistry } from '../../services/dispatcher/registry/registry.js';
import { getToolDefinitions, SANDBOX_TOOLS } from '../../services/dispatcher/registry/toolsets.js';
import type { ToolRegistration } from '../../services/dispatcher/registry/tool-types.js';

const LIMITS = { timeoutSec: 300, maxStdoutBytes: 50_000, maxToolCalls: 50 };

describe('stub signatures', () => {
  // The reference module's signatures (newer than the spec: read_file's limit is 2000, and
  // cross_profile and order were added), so scripts written for it call these unchanged.
  it('are exactly the reference module\'s', () => {
    assert.deepEqual(SANDBOX_TOOLS.map(stubSignature), [
      'web_search(query, limit=5)',
      'web_extract(urls, char_limit=None)',
      'read_file(path, offset=1, limit=2000)',
      'write_file(path, content, cross_profile=False)',
      'search_files(pattern, target="content", path=".", file_glob=None, limit=50, offset=0, output_mode="content", ' +
        'context=0, order="discovery")',
      'patch(path=None, old_string=None, new_string=None, replace_all=False, mode="replace", patch=None, ' +
        'cross_profile=False)',
      'terminal(command, timeout=None, workdir=None)',
    ]);
  });
});

describe('buildExecuteCodeSchema', () => {
  it('has one required string parameter, code', () => {
    const schema = buildExecuteCodeSchema(SANDBOX_TOOLS, LIMITS);
    assert.equal(schema.name, 'execute_code');
    assert.deepEqual(Object.keys(schema.parameters.properties as object), ['code']);
    assert.deepEqual(schema.parameters.required, ['code']);
  });

  it('states the configured limits in the spec\'s words', () => {
    assert.equal(describeLimits(LIMITS), '5-minute timeout, 50KB stdout cap, max 50 tool calls per script');
    assert.match(buildExecuteCodeSchema(SANDBOX_TOOLS, LIMITS).description, /5-minute timeout, 50KB stdout cap, max 50 tool calls per script/);
    assert.equal(
      describeLimits({ timeoutSec: 90, maxStdoutBytes: 20_000, maxToolCalls: 7 }),
      '90-second timeout, 20KB stdout cap, max 7 tool calls per script',
    );
  });

  it('lists exactly the available sandbox tools and the helpers', () => {
    const description = buildExecuteCodeSchema(['terminal', 'read_file', 'process', 'execute_code'], LIMITS).description;
    const listed = /Available via `from hermes_tools import \.\.\.`: (.*)\.\n/.exec(description)?.[1];
    assert.equal(
      listed,
      'read_file(path, offset=1, limit=2000), terminal(command, timeout=None, workdir=None), json_parse(text), shell_quote(s), retry(fn, max_attempts=3, delay=2)',
    );
    for (const absent of ['web_search', 'write_file', 'patch(', 'search_files', 'process', 'execute_code(']) {
      assert.ok(!description.includes(absent), `${absent} should not be listed`);
    }
  });

  it('is patched at listing time to the sandbox tools that survived filtering', async () => {
    const registry = new ToolRegistry({ logger: silentLogger() });
    const reg = (name: string, toolset: string): ToolRegistration => ({
      name,
      toolset,
      schema: { name, description: `${name} tool`, parameters: { type: 'object', properties: {} } },
      handler: () => '{}',
    });
    for (const [name, toolset] of [
      ['terminal', 'terminal'],
      ['process_manage', 'terminal'],
      ['read_file', 'file'],
      ['write_file', 'file'],
      ['patch', 'file'],
      ['search_files', 'file'],
      ['execute_code', 'code_execution'],
    ] as const) {
      registry.register(reg(name, toolset));
    }
    const patchers = { executeCode: executeCodeSchemaPatcher({ timeoutSec: 120, maxStdoutBytes: 50_000, maxToolCalls: 10 }) };
    const onlyTerminal = await getToolDefinitions(registry, { enabled: ['terminal', 'code_execution'] }, patchers);
    const schema = onlyTerminal.tools.find((t) => t.function.name === 'execute_code')?.function;
    assert.ok(schema);
    assert.match(schema.description, /: terminal\(command, timeout=None, workdir=None\), json_parse/);
    assert.ok(!schema.description.includes('read_file'));
    assert.match(schema.description, /2-minute timeout, 50KB stdout cap, max 10 tool calls per script/);
  });
});

describe('hermes_tools.py against a real socket', () => {
  let dir: string;
  let server: net.Server;
  const seen: unknown[] = [];
  /** What the fake dispatcher answers, by tool. */
  const answers: Record<string, string> = {
    read_file: '{"content": "     1|hello", "total_lines": 1}',
    terminal: JSON.stringify(JSON.stringify({ output: 'multi\nline', exit_code: 0 })),
    search_files: 'not json at all',
  };

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'berth-stub-'));
    await writeFile(path.join(dir, 'hermes_tools.py'), buildHermesToolsModule(['read_file', 'search_files', 'terminal']));
    server = net.createServer((socket) => {
      let buffered = '';
      socket.on('data', (chunk) => {
        buffered += chunk.toString('utf8');
        for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
          const request = JSON.parse(buffered.slice(0, nl)) as { tool: string };
          buffered = buffered.slice(nl + 1);
          seen.push(request);
          socket.write(`${answers[request.tool] ?? '{"error": "?"}'}\n`);
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(path.join(dir, 'rpc.sock'), resolve));
  });

  after(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await rm(dir, { recursive: true, force: true });
  });

  async function python(code: string): Promise<string> {
    const { stdout } = await promisify(execFile)('python3', ['-c', code], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, PYTHONPATH: dir, HERMES_RPC_SOCKET: path.join(dir, 'rpc.sock'), HERMES_RPC_TOKEN: 'tok' },
      timeout: 30_000,
    });
    return stdout;
  }

  it('sends {"tool","args","token"} lines, drops None arguments and returns the parsed result', async () => {
    seen.length = 0;
    const out = await python(
      'import json\nfrom hermes_tools import read_file, search_files, terminal\n' +
        'print(json.dumps([read_file("a.txt"), terminal("echo hi"), search_files("x", file_glob="*.py")]))',
    );
    assert.deepEqual(JSON.parse(out), [
      { content: '     1|hello', total_lines: 1 },
      { output: 'multi\nline', exit_code: 0 },
      'not json at all',
    ]);
    assert.deepEqual(seen, [
      { tool: 'read_file', args: { path: 'a.txt', offset: 1, limit: 2000 }, token: 'tok' },
      { tool: 'terminal', args: { command: 'echo hi' }, token: 'tok' },
      {
        tool: 'search_files',
        args: {
          pattern: 'x',
          target: 'content',
          path: '.',
          file_glob: '*.py',
          limit: 50,
          offset: 0,
          output_mode: 'content',
          context: 0,
          order: 'discovery',
        },
        token: 'tok',
      },
    ]);
  });

  it('returns a truncated search as its JSON object, the hint inside it, and text that is not JSON as text', async () => {
    const plain = answers.search_files;
    const hint = 'Results truncated. Use offset=50 to see more, or narrow with a more specific pattern or file_glob.';
    answers.search_files = JSON.stringify(JSON.stringify({ total_count: 60, truncated: true, _hint: hint }));
    try {
      const out = await python('import json\nfrom hermes_tools import search_files\nprint(json.dumps(search_files("x")))');
      assert.deepEqual(JSON.parse(out), { total_count: 60, truncated: true, _hint: hint });
      answers.search_files = JSON.stringify('plain words\n\n[Hint: x]');
      const text = await python('import json\nfrom hermes_tools import search_files\nprint(json.dumps(search_files("x")))');
      assert.equal(JSON.parse(text), 'plain words\n\n[Hint: x]');
    } finally {
      answers.search_files = plain ?? '';
    }
  });

  it('has only the enabled tools, and the helpers', async () => {
    const out = await python(
      'import hermes_tools as h\n' +
        'print(sorted(n for n in ("web_search","web_extract","read_file","write_file","search_files","patch","terminal") if hasattr(h, n)))\n' +
        'print(h.shell_quote("it\'s a file"))\n' +
        'print(h.json_parse(\'{"a": "x\\ty"}\')["a"] == "x\\ty")\n' +
        'print(h.json_parse("\\ufeff[1, 2]"))\n' +
        'calls = []\n' +
        'def flaky():\n' +
        '    calls.append(1)\n' +
        '    if len(calls) < 3: raise ValueError("not yet")\n' +
        '    return "ok"\n' +
        'print(h.retry(flaky, max_attempts=3, delay=0), len(calls))',
    );
    assert.deepEqual(out.trim().split('\n'), [
      "['read_file', 'search_files', 'terminal']",
      `'it'"'"'s a file'`,
      'True',
      '[1, 2]',
      'ok 3',
    ]);
  });
});
