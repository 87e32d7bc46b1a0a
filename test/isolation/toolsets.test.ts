/**
 * `tenants[].toolsets` through a real `berth serve` with two tenants on the
 * local backend: tenant A (alpha) is limited to some toolsets, tenant B
 * (beta) has no `toolsets` key. A sees only its tools, and every other tool
 * (top-level CallTool, a Session call, an execute_code script's call) gets
 * the answer a tool that does not exist gets, with nothing run and no quota
 * used; B is unaffected. Unknown toolset names stop the start.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { hashApiKey } from '../../services/common/config.js';
import type { DispatcherClient } from '../../services/gen/berth/v1/dispatcher.js';
import { pythonBinDir } from '../support/python-bin.js';
import { BERTH_BIN, REPO_ROOT, waitForLog } from '../support/serve-process.js';
import { startTwoTenants, streamingTerminal, type TwoTenants } from '../support/two-tenants.js';

const FILE_TOOLS = ['patch', 'read_file', 'search_files', 'write_file'];
const unknown = (tool: string) => JSON.stringify({ error: `Unknown tool: ${tool}` });

/** A scratch directory as the tasks' working directory, and the environment that makes scripts start fast. */
function scratch(prefix: string) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const work = join(dir, 'work');
  mkdirSync(work);
  return {
    dir,
    work,
    configLines: [`terminal: { cwd: ${JSON.stringify(work)} }`],
    env: { PATH: `${pythonBinDir(dir)}:${process.env.PATH ?? ''}`, HOME: dir },
  };
}

async function toolNames(client: DispatcherClient, enabledToolsets: string[] = []): Promise<string[]> {
  const r = await client.listTools({ enabledToolsets, disabledToolsets: [] });
  return (JSON.parse(r.toolsJson) as Array<{ function: { name: string } }>).map((t) => t.function.name).sort();
}

describe('tenants[].toolsets: [file] (local backend)', () => {
  let t: TwoTenants;
  let s: ReturnType<typeof scratch>;

  before(async () => {
    s = scratch('berth-iso-toolsets-');
    // Two calls a minute: the refused calls below must not use any of them.
    t = await startTwoTenants({
      backend: 'local',
      configLines: s.configLines,
      env: s.env,
      tenantFields: { alpha: 'toolsets: [file], quotas: { calls_per_minute: 2 }' },
    });
  });

  after(async () => {
    await t?.stop();
    rmSync(s.dir, { recursive: true, force: true });
  });

  test('A lists only the file tools, whatever its client enables; B lists everything', async () => {
    assert.deepEqual(await toolNames(t.a), FILE_TOOLS);
    assert.deepEqual(await toolNames(t.a, ['terminal', 'file_tools', 'code_execution']), FILE_TOOLS);
    assert.deepEqual(await toolNames(t.a, ['terminal']), []);
    const b = await toolNames(t.b);
    for (const tool of ['terminal', 'process_manage', 'execute_code', ...FILE_TOOLS]) assert.ok(b.includes(tool), tool);
  });

  test('A gets "Unknown tool" for terminal, process, process_manage and execute_code, nothing runs, no quota is used', async () => {
    const marker = join(s.work, 'alpha-ran');
    const command = `touch ${marker}`;
    assert.equal(await t.call(t.a, 'terminal', { command }, 'a1'), unknown('terminal'));
    assert.equal(await t.call(t.a, 'process', { action: 'list' }, 'a1'), unknown('process_manage'));
    assert.equal(await t.call(t.a, 'process_manage', { action: 'list' }, 'a1'), unknown('process_manage'));
    assert.equal(await t.call(t.a, 'execute_code', { code: `open(${JSON.stringify(marker)}, "w")` }, 'a1'), unknown('execute_code'));
    assert.equal(await streamingTerminal(t.a, 'a1', command).result, unknown('terminal'));
    assert.equal(existsSync(marker), false, 'no refused call ran');
    await waitForLog(t.serve, /"tool":"terminal".*tool call refused: not in the tenant's toolsets/);

    // Both calls of A's minute are still there for its own tools.
    const wrote = JSON.parse(await t.call(t.a, 'write_file', { path: 'a.txt', content: 'alpha\n' }, 'a1')) as Record<string, unknown>;
    assert.equal(wrote.error, undefined, JSON.stringify(wrote));
    assert.equal(readFileSync(join(s.work, 'a.txt'), 'utf8'), 'alpha\n');
    const read = JSON.parse(await t.call(t.a, 'read_file', { path: 'a.txt' }, 'a1')) as { content?: string };
    assert.match(read.content ?? '', /alpha/);
  });

  test('B runs terminal and process_manage as before', async () => {
    const r = JSON.parse(await t.call(t.b, 'terminal', { command: 'echo beta-ran' }, 'b1')) as { output?: string; exit_code?: number };
    assert.equal(r.exit_code, 0);
    assert.match(r.output ?? '', /beta-ran/);
    const list = JSON.parse(await t.call(t.b, 'process', { action: 'list' }, 'b1')) as Record<string, unknown>;
    assert.equal(list.error, undefined, JSON.stringify(list));
  });
});

describe('tenants[].toolsets: [file, code_execution] (local backend)', () => {
  let t: TwoTenants;
  let s: ReturnType<typeof scratch>;
  /** Each tenant's script writes a file of its own: overwriting a file the task never read is refused (stale_write_blocked). */
  const script = (marker: string, file: string) =>
    [
      'import hermes_tools',
      'try:',
      '    from hermes_tools import terminal',
      '    print("terminal stub present")',
      'except ImportError:',
      '    print("no terminal stub")',
      `r = hermes_tools._call("terminal", {"command": ${JSON.stringify(`touch ${marker}`)}})`,
      'print(r.get("error") or "terminal ran")',
      `print(hermes_tools.write_file(${JSON.stringify(file)}, "from script").get("bytes_written"))`,
    ].join('\n');

  before(async () => {
    s = scratch('berth-iso-toolsets-code-');
    t = await startTwoTenants({
      backend: 'local',
      configLines: s.configLines,
      env: s.env,
      tenantFields: { alpha: 'toolsets: [file, code_execution]' },
    });
  });

  after(async () => {
    await t?.stop();
    rmSync(s.dir, { recursive: true, force: true });
  });

  test("A's execute_code schema names only the file tools", async () => {
    const r = await t.a.listTools({ enabledToolsets: [], disabledToolsets: [] });
    const tools = JSON.parse(r.toolsJson) as Array<{ function: { name: string; description: string } }>;
    assert.deepEqual(tools.map((x) => x.function.name).sort(), ['execute_code', ...FILE_TOOLS].sort());
    const description = tools.find((x) => x.function.name === 'execute_code')?.function.description ?? '';
    assert.match(description, /`from hermes_tools import \.\.\.`: read_file\(/);
    assert.doesNotMatch(description, /terminal\(command/);
    assert.doesNotMatch(description, /web_search\(/);
  });

  test("a script of A has no terminal stub and its terminal call is refused; B's script runs terminal", async () => {
    const marker = join(s.work, 'alpha-script-ran');
    const a = JSON.parse(await t.call(t.a, 'execute_code', { code: script(marker, 'a.txt') }, 'a2')) as { status: string; output: string };
    assert.equal(a.status, 'success', JSON.stringify(a));
    assert.deepEqual(a.output.trim().split('\n'), [
      'no terminal stub',
      "Tool 'terminal' is not available in execute_code. Available: patch, read_file, search_files, write_file",
      '11',
    ]);
    assert.equal(existsSync(marker), false);
    assert.equal(readFileSync(join(s.work, 'a.txt'), 'utf8'), 'from script');

    const bMarker = join(s.work, 'beta-script-ran');
    const b = JSON.parse(await t.call(t.b, 'execute_code', { code: script(bMarker, 'b.txt') }, 'b2')) as { status: string; output: string };
    assert.equal(b.status, 'success', JSON.stringify(b));
    assert.deepEqual(b.output.trim().split('\n'), ['terminal stub present', 'terminal ran', '11']);
    assert.equal(existsSync(bMarker), true, "B's script ran terminal");
    assert.equal(readFileSync(join(s.work, 'b.txt'), 'utf8'), 'from script');
  });
});

test('an unknown toolset name in tenants[].toolsets stops berth serve with a config error', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'berth-iso-toolsets-bad-'));
  try {
    const config = join(dir, 'config.yaml');
    writeFileSync(
      config,
      [
        'allow_local_multi_tenant: true',
        'tenants:',
        `  - { id: alpha, api_key_sha256: ${hashApiKey('a')}, toolsets: [file, shell] }`,
        `  - { id: beta, api_key_sha256: ${hashApiKey('b')} }`,
        '',
      ].join('\n'),
    );
    const r = await promisify(execFile)(process.execPath, [BERTH_BIN, 'serve', '--port', '0', '--config', config], {
      cwd: REPO_ROOT,
      env: { ...process.env, BERTH_STATE_ROOT: dir },
      timeout: 30_000,
    }).then(
      () => ({ code: 0, stderr: '' }),
      (err: { code?: number; stderr?: string }) => ({ code: err.code, stderr: err.stderr ?? '' }),
    );
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /tenants\[alpha\]\.toolsets: unknown toolset 'shell'/);
    assert.match(r.stderr, /known toolset names: .*\bfile\b/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
