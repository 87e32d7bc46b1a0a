/**
 * End to end: MCP servers as tools through a real `berth serve` with two
 * tenants, on the local and docker backends. A real MCP server on
 * `@modelcontextprotocol/sdk` (test/fixtures/mcp/sdk-server.ts) where the
 * sandbox has Node (local); the same tools in Python's standard library
 * (stdlib_server.py) inside docker containers, whose image has no Node,
 * mounted read-only as an operator would install a server.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { dockerUnavailableReason } from '../support/docker-fixtures.js';
import { REPO_ROOT } from '../support/serve-process.js';
import { startTwoTenants, type TwoTenants } from '../support/two-tenants.js';

const FIXTURES = join(REPO_ROOT, 'test', 'fixtures', 'mcp');
const SECRET = `ghp_${'Zx9'.repeat(12)}`;

function toolNames(toolsJson: string): string[] {
  return (JSON.parse(toolsJson) as Array<{ function: { name: string } }>).map((t) => t.function.name).sort();
}

function parsed(resultJson: string): Record<string, unknown> {
  return JSON.parse(resultJson) as Record<string, unknown>;
}

/** A Streamable HTTP MCP server on loopback (stateless), with one tool. */
async function startHttpServer(): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    const mcp = new McpServer({ name: 'berth-http-fixture', version: '1.0.0' });
    mcp.registerTool('whoami', { description: 'Say which server this is', annotations: { readOnlyHint: true } }, async () => ({
      content: [{ type: 'text', text: 'http fixture here' }],
    }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void mcp.close();
    });
    void mcp.connect(transport).then(() => transport.handleRequest(req, res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return { url: `http://127.0.0.1:${address.port}/mcp`, server };
}

interface BackendCase {
  readonly backend: 'local' | 'docker';
  /** The stdio server's command and args, as the sandbox runs it. */
  readonly server: readonly string[];
  readonly extraConfig: readonly string[];
  /** Where write-note writes, as the sandbox sees it. */
  readonly notePath: (dir: string) => string;
}

function suite(c: BackendCase, skip: string | undefined) {
  describe(`MCP servers as tools, ${c.backend} backend`, { skip }, () => {
    let t: TwoTenants;
    let dir: string;
    let http: { url: string; server: Server } | undefined;

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'berth-mcp-servers-'));
      http = c.backend === 'local' ? await startHttpServer() : undefined;
      const [command, ...args] = c.server;
      const srv = `{ command: ${JSON.stringify(command)}, args: ${JSON.stringify(args)}, timeout: 2, env: { FIXTURE_SECRET: ${SECRET} } }`;
      t = await startTwoTenants({
        backend: c.backend,
        configLines: [
          'approvals: { skip_in_containers: false }',
          ...c.extraConfig,
          'mcp_servers:',
          '  broken: { command: /nonexistent/berth-mcp-server, connect_timeout: 20 }',
          ...(http ? [`  web: { url: "${http.url}" }`, 'docker: { egress_allow: ["127.0.0.1/32"] }'] : []),
        ],
        tenantFields: {
          alpha: `mcp_servers: { srv: ${srv} }${http ? ', network: { egress_allow: [] }' : ''}`,
        },
      });
    });

    after(async () => {
      await t?.stop();
      if (http) await new Promise((resolve) => http!.server.close(resolve));
      rmSync(dir, { recursive: true, force: true });
    });

    test("a tenant's own server's tools are listed under upstream's names; another tenant never sees them", async () => {
      const a = toolNames((await t.a.listTools({ enabledToolsets: [], disabledToolsets: [], explain: false })).toolsJson);
      for (const name of ['mcp__srv__echo', 'mcp__srv__write_note', 'mcp__srv__crash', 'mcp__srv__slow', 'mcp__srv__leak']) {
        assert.ok(a.includes(name), `${name} in ${a.join(', ')}`);
      }
      assert.ok(a.includes('terminal'));
      const b = toolNames((await t.b.listTools({ enabledToolsets: [], disabledToolsets: [], explain: false })).toolsJson);
      assert.deepEqual(b.filter((n) => n.startsWith('mcp__srv__')), []);
      assert.deepEqual(parsed(await t.call(t.b, 'mcp__srv__echo', { text: 'x' }, 'b1')), { error: 'Unknown tool: mcp__srv__echo' });
    });

    test('the schema is passed on with the tool', async () => {
      const tools = JSON.parse((await t.a.listTools({ enabledToolsets: ['mcp-srv'], disabledToolsets: [], explain: false })).toolsJson) as Array<{
        function: { name: string; description: string; parameters: { type: string; properties: Record<string, unknown>; required?: string[] } };
      }>;
      const echo = tools.find((tool) => tool.function.name === 'mcp__srv__echo')!;
      assert.equal(echo.function.description, 'Echo the text back');
      assert.equal(echo.function.parameters.type, 'object');
      assert.deepEqual(Object.keys(echo.function.parameters.properties), ['text']);
      assert.deepEqual(echo.function.parameters.required, ['text']);
      assert.deepEqual(tools.map((tool) => tool.function.name).sort(), [
        'mcp__srv__crash',
        'mcp__srv__echo',
        'mcp__srv__leak',
        'mcp__srv__slow',
        'mcp__srv__write_note',
      ]);
    });

    test('a call runs in the calling task and answers as upstream does', async () => {
      const r = parsed(await t.call(t.a, 'mcp__srv__echo', { text: 'hello' }, 'a1'));
      assert.match(String(r.result), /^echo: hello \(pid \d+\)$/);
    });

    test('what a server returns is redacted like terminal output', async () => {
      const r = await t.call(t.a, 'mcp__srv__leak', {}, 'a1');
      assert.ok(!r.includes(SECRET), r);
      assert.match(String(parsed(r).result), /^key: ghp_/);
    });

    test('a tool without readOnlyHint goes through approval: pending, then run once approved', async () => {
      const path = c.notePath(dir);
      const pending = parsed(await t.call(t.a, 'mcp__srv__write_note', { path, note: 'hello' }, 'a2', 's2'));
      assert.equal(pending.status, 'pending_approval');
      assert.equal(pending.pattern_key, 'mcp srv.write-note');
      assert.match(String(pending.command), /^MCP srv\.write-note\narguments: /);
      if (c.backend === 'local') assert.equal(existsSync(path), false, 'nothing ran before the answer');
      const approved = await t.a.approve({ taskId: 'a2', sessionId: 's2', approvalId: String(pending.approval_id), choice: 'once' });
      assert.deepEqual(parsed(approved.resultJson), { result: 'wrote hello' });
      if (c.backend === 'local') assert.equal(readFileSync(path, 'utf8'), 'hello\n');
    });

    test('a server that crashes gives a clear error, other tools keep working, and the next call starts it again', async () => {
      const before = String(parsed(await t.call(t.a, 'mcp__srv__echo', { text: 'one' }, 'a3')).result);
      const crash = parsed(await t.call(t.a, 'mcp__srv__crash', {}, 'a3'));
      assert.match(String(crash.error), /^MCP server 'srv' exited while answering tool 'crash'\. It exited with code 3\./);
      assert.match(String(crash.error), /crashing on purpose/);
      assert.match(String(crash.error), /started again on the next call/);
      const terminal = parsed(await t.call(t.a, 'terminal', { command: 'echo still-here' }, 'a3'));
      assert.equal(terminal.output, 'still-here');
      const after = String(parsed(await t.call(t.a, 'mcp__srv__echo', { text: 'two' }, 'a3')).result);
      assert.match(after, /^echo: two \(pid \d+\)$/);
      assert.notEqual(after.replace('two', 'one'), before, 'a new server process answers');
    });

    test('a slow server times out with a clear error and does not hold up other tools', async () => {
      let slowDone = false;
      const slow = t.call(t.a, 'mcp__srv__slow', { ms: 30_000 }, 'a4').finally(() => {
        slowDone = true;
      });
      const terminal = parsed(await t.call(t.a, 'terminal', { command: 'echo meanwhile' }, 'a5'));
      assert.equal(terminal.output, 'meanwhile');
      assert.equal(slowDone, false, 'terminal answered while the MCP call was still waiting');
      const r = parsed(await slow);
      assert.match(String(r.error), /^MCP server 'srv' did not answer tool 'slow' within 2s \(its timeout\); the request was cancelled\./);
    });

    test('a server that cannot start leaves the others working and says why', async () => {
      const listing = await t.a.listTools({ enabledToolsets: [], disabledToolsets: [], explain: true });
      assert.deepEqual(toolNames(listing.toolsJson).filter((n) => n.startsWith('mcp__broken__')), []);
      const report = JSON.parse(listing.availabilityJson) as { unavailable: Array<{ name: string; reason: string }> };
      const broken = report.unavailable.find((u) => u.name === 'mcp-broken');
      assert.ok(broken, listing.availabilityJson);
      assert.match(broken.reason, /^MCP server 'broken' \(\/nonexistent\/berth-mcp-server in the task's environment\) /);
      assert.match(broken.reason, /Check that the command exists in the task's environment|did not finish the MCP handshake/);
      assert.deepEqual(parsed(await t.call(t.a, 'mcp__broken__anything', {}, 'a6')), { error: 'Unknown tool: mcp__broken__anything' });
    });

    if (c.backend === 'local') {
      test("an HTTP server is reached under the tenant's egress policy, and refused outside it", async () => {
        const b = toolNames((await t.b.listTools({ enabledToolsets: [], disabledToolsets: [], explain: false })).toolsJson);
        assert.ok(b.includes('mcp__web__whoami'), b.join(', '));
        assert.deepEqual(parsed(await t.call(t.b, 'mcp__web__whoami', {}, 'b2')), { result: 'http fixture here' });
        // alpha's network policy narrows egress_allow to nothing: 127.0.0.1 is not public.
        const listing = await t.a.listTools({ enabledToolsets: [], disabledToolsets: [], explain: true });
        assert.ok(!toolNames(listing.toolsJson).includes('mcp__web__whoami'));
        const report = JSON.parse(listing.availabilityJson) as { unavailable: Array<{ name: string; reason: string }> };
        const web = report.unavailable.find((u) => u.name === 'mcp-web');
        assert.ok(web, listing.availabilityJson);
        assert.match(web.reason, /was not contacted: .*is not reachable under this tenant's egress policy: 127\.0\.0\.1 is in 127\.0\.0\.0\/8, not public/);
        assert.deepEqual(parsed(await t.call(t.a, 'mcp__web__whoami', {}, 'a7')), { error: 'Unknown tool: mcp__web__whoami' });
      });
    }
  });
}

suite(
  {
    backend: 'local',
    server: [process.execPath, join(REPO_ROOT, 'dist', 'test', 'fixtures', 'mcp', 'sdk-server.js')],
    extraConfig: [],
    notePath: (dir) => join(dir, 'note.txt'),
  },
  undefined,
);

const dockerSkip = await dockerUnavailableReason();
suite(
  {
    backend: 'docker',
    server: ['python3', '/opt/berth-mcp/stdlib_server.py'],
    extraConfig: [`terminal: { docker_volumes: ["${FIXTURES}:/opt/berth-mcp:ro"] }`],
    notePath: () => '/tmp/note.txt',
  },
  dockerSkip,
);
