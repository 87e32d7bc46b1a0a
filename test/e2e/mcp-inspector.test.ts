/**
 * docs/mcp.md's desktop-client configuration, read by a third-party MCP
 * client: the MCP Inspector's CLI mode (`@modelcontextprotocol/inspector`,
 * a devDependency) takes the same `mcpServers` file Claude Desktop does,
 * starts `berth mcp` from it, and lists and calls tools through it.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hashApiKey } from '../../services/common/config.js';
import { fencedBlocks } from '../support/markdown-docs.js';
import { REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';
import { makeUserDirectory, type UserDirectory } from '../support/user-directory.js';

const INSPECTOR = join(REPO_ROOT, 'node_modules', '@modelcontextprotocol', 'inspector', 'clients', 'launcher', 'build', 'index.js');
const API_KEY = 'inspector-e2e-key';

interface DesktopConfig {
  mcpServers: Record<string, { command: string; args: string[]; env?: Record<string, string> }>;
}

/** The page's claude_desktop_config.json, pointed at this test's server and key. */
function pageConfig(address: string): DesktopConfig {
  const block = fencedBlocks('docs/mcp.md').find((b) => b.lang === 'json' && b.body.includes('"mcpServers"'));
  assert.ok(block, 'docs/mcp.md shows a desktop client configuration');
  const config = JSON.parse(block.body) as DesktopConfig;
  const berth = config.mcpServers.berth!;
  assert.equal(berth.command, 'berth');
  const at = berth.args.indexOf('--server');
  assert.ok(at >= 0, 'the configuration names the server');
  berth.args[at + 1] = address;
  assert.equal(berth.env?.BERTH_API_KEY, '...', 'the page leaves the key to the reader');
  berth.env!.BERTH_API_KEY = API_KEY;
  return config;
}

describe('the MCP Inspector, configured as docs/mcp.md configures a desktop client', () => {
  let serve: ServeProcess;
  let user: UserDirectory;
  let root: string;
  let workspace: string;
  let configFile: string;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    user = makeUserDirectory('berth-e2e-inspector-');
    ({ root, workspace } = user);
    const berthConfig = join(root, 'berth.yaml');
    writeFileSync(berthConfig, `allow_local_multi_tenant: true\ntenants:\n  - { id: desktop, api_key_sha256: ${hashApiKey(API_KEY)} }\n`);
    serve = await startServe(['--config', berthConfig], { env: { TERMINAL_CWD: workspace } });
    configFile = join(root, 'claude_desktop_config.json');
    writeFileSync(configFile, JSON.stringify(pageConfig(serve.address)));
    mkdirSync(join(root, 'home'));
    // The Inspector keeps its state under HOME: here, the test's own directory.
    env = {
      ...process.env,
      PATH: user.path,
      HOME: join(root, 'home'),
      MCP_INSPECTOR_SECRET_STORE: 'memory',
      BERTH_API_KEY: '',
    };
  });

  after(async () => {
    await serve?.stop();
    user?.remove();
  });

  const inspector = (args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [INSPECTOR, '--cli', '--config', configFile, '--server', 'berth', ...args],
        { env, cwd: root, timeout: 120_000, maxBuffer: 16 * 1024 * 1024 },
        (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });

  test('tools/list: the tools berth tools lists, without the agent-loop stubs', async () => {
    const r = await inspector(['--method', 'tools/list']);
    assert.equal(r.code, 0, r.stderr);
    const names = (JSON.parse(r.stdout) as { tools: Array<{ name: string }> }).tools.map((t) => t.name);
    const listed = (JSON.parse((await serve.cli(['tools'], { env: { BERTH_API_KEY: API_KEY } })).stdout) as Array<{ function: { name: string } }>)
      .map((t) => t.function.name)
      .filter((n) => !['todo_list', 'memory', 'session_search', 'delegate_task'].includes(n));
    assert.deepEqual(names, listed);
    assert.match(r.stderr, /berth mcp: serving task desktop of /);
  });

  test('tools/call: terminal runs in the task the configuration names, with the key it carries', async () => {
    const r = await inspector(['--method', 'tools/call', '--tool-name', 'terminal', '--tool-arg', 'command=pwd']);
    assert.equal(r.code, 0, r.stderr);
    const result = JSON.parse(r.stdout) as { content: Array<{ type: string; text: string }>; isError?: boolean };
    assert.equal(result.isError, undefined);
    assert.deepEqual(JSON.parse(result.content[0]!.text), { output: workspace, exit_code: 0, error: null });
    const refused = await inspector(['--method', 'tools/call', '--tool-name', 'read_file', '--tool-arg', 'path=/nonexistent/x']);
    assert.equal((JSON.parse(refused.stdout) as { isError?: boolean }).isError, true);
  });

});
