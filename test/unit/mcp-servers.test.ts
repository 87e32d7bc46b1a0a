/**
 * MCP servers as tools, the parts that need no server: upstream's naming and
 * schema repairs, the stdio relay's handling of hostile output, and the
 * egress policy of HTTP servers.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { mcpToolName, normalizeMcpInputSchema, redactMcpError, sanitizeMcpNameComponent } from '../../services/dispatcher/mcp/mcp-names.js';
import { egressFetch, egressRefusal, EgressRefusedError } from '../../services/executor/mcp/egress-fetch.js';
import { MAX_LINE_BYTES, SandboxStdioTransport } from '../../services/executor/mcp/sandbox-stdio-transport.js';
import type { BackgroundHandle } from '../../services/executor/backend.js';
import type { ShellBackgroundRequest } from '../../services/executor/shell-state/shell-state-runner.js';

describe('MCP tool names and schemas', () => {
  test("names follow upstream's mcp__server__tool with sanitised parts", () => {
    assert.equal(mcpToolName('my-server', 'list-devices'), 'mcp__my_server__list_devices');
    assert.equal(mcpToolName('a..b', '__x__y__'), 'mcp__a_b__x_y');
    assert.equal(sanitizeMcpNameComponent('***'), 'unnamed');
  });

  test('schemas are repaired as upstream repairs them', () => {
    assert.deepEqual(normalizeMcpInputSchema(undefined), { type: 'object', properties: {} });
    assert.deepEqual(normalizeMcpInputSchema({ type: 'object' }), { type: 'object', properties: {} });
    assert.deepEqual(
      normalizeMcpInputSchema({
        type: 'object',
        properties: { a: { anyOf: [{ type: 'string' }, { type: 'null' }] }, b: { $ref: '#/definitions/B' } },
        required: ['a', 'ghost'],
        definitions: { B: { properties: { c: { type: 'number' } } } },
      }),
      {
        type: 'object',
        properties: { a: { type: 'string' }, b: { $ref: '#/$defs/B' } },
        required: ['a'],
        $defs: { B: { type: 'object', properties: { c: { type: 'number' } } } },
      },
    );
  });

  test('credential-looking text in an error is redacted', () => {
    assert.equal(redactMcpError('401 with Bearer abc.def token=xyz'), '401 with [REDACTED] [REDACTED]');
  });
});

/** A launcher double: records what the transport writes and lets the test play the server's output. */
function launcherDouble() {
  const writes: string[] = [];
  let kills = 0;
  let request: ShellBackgroundRequest | undefined;
  const handle: BackgroundHandle = {
    pid: 1,
    write: async (data) => {
      writes.push(String(data));
    },
    closeStdin: async () => undefined,
    kill: async () => {
      kills += 1;
      request?.onExit(-15);
    },
  };
  return {
    writes,
    get kills() {
      return kills;
    },
    get command() {
      return request?.command ?? '';
    },
    output: (text: string | Buffer) => request!.onOutput(Buffer.isBuffer(text) ? text : Buffer.from(text)),
    exit: (code: number) => request!.onExit(code),
    launcher: {
      env: { stateDir: '/state', readFile: async () => Buffer.from('server: bad things\n') },
      startBackground: async (r: ShellBackgroundRequest) => {
        request = r;
        return handle;
      },
    },
  };
}

describe('the stdio relay of a server in the sandbox', () => {
  test('runs the command with stderr in the task state directory and relays JSON-RPC lines both ways', async () => {
    const d = launcherDouble();
    const t = new SandboxStdioTransport(d.launcher, { name: 'srv', command: 'npx', args: ['-y', 'some server'], env: {} });
    const got: JSONRPCMessage[] = [];
    t.onmessage = (m) => got.push(m);
    await t.start();
    assert.equal(d.command, "exec 2>'/state/mcp-srv.stderr'; exec 'npx' '-y' 'some server'");
    await t.send({ jsonrpc: '2.0', id: 1, method: 'ping' });
    assert.deepEqual(d.writes, ['{"jsonrpc":"2.0","id":1,"method":"ping"}\n']);
    d.output('not json\n{"jsonrpc":"2.0","id":1,');
    d.output('"result":{}}\n{"no":"rpc"}\n');
    assert.deepEqual(got, [{ jsonrpc: '2.0', id: 1, result: {} }]);
    assert.equal(await t.diagnostics(), 'server: bad things\nnot json\n{"no":"rpc"}');
  });

  test('a line longer than the bound stops the server instead of growing without end', async () => {
    const d = launcherDouble();
    const t = new SandboxStdioTransport(d.launcher, { name: 'srv', command: 'x', args: [], env: {} });
    let closed = 0;
    const errors: string[] = [];
    t.onclose = () => (closed += 1);
    t.onerror = (e) => errors.push(e.message);
    await t.start();
    const chunk = Buffer.alloc(1024 * 1024, 0x61);
    for (let i = 0; i <= MAX_LINE_BYTES / chunk.length; i++) d.output(chunk);
    assert.equal(d.kills, 1);
    assert.equal(closed, 1);
    assert.deepEqual(errors, [`it wrote a line longer than ${MAX_LINE_BYTES} bytes to stdout`]);
    assert.deepEqual(t.exit, { exitCode: -15, reason: `it wrote a line longer than ${MAX_LINE_BYTES} bytes to stdout` });
    await assert.rejects(t.send({ jsonrpc: '2.0', id: 2, method: 'ping' }), /is not running/);
  });

  test('an exit closes the transport once, with the exit code', async () => {
    const d = launcherDouble();
    const t = new SandboxStdioTransport(d.launcher, { name: 'srv', command: 'x', args: [], env: {} });
    let closed = 0;
    t.onclose = () => (closed += 1);
    await t.start();
    d.exit(3);
    await t.close();
    assert.equal(closed, 1);
    assert.deepEqual(t.exit, { exitCode: 3, reason: undefined });
  });
});

describe("HTTP servers under the tenant's egress policy", () => {
  test('public-only refuses private ranges, open only link-local, none everything; egress_allow opens a range', () => {
    assert.match(egressRefusal('127.0.0.1', { egress: 'public-only', egressAllow: [] })!, /127\.0\.0\.0\/8, not public/);
    assert.equal(egressRefusal('127.0.0.1', { egress: 'public-only', egressAllow: ['127.0.0.1/32'] }), undefined);
    assert.equal(egressRefusal('10.1.2.3', { egress: 'open', egressAllow: [] }), undefined);
    assert.match(egressRefusal('169.254.169.254', { egress: 'open', egressAllow: [] })!, /link-local/);
    assert.match(egressRefusal('8.8.8.8', { egress: 'none', egressAllow: [] })!, /none/);
    assert.equal(egressRefusal('8.8.8.8', { egress: 'public-only', egressAllow: [] }), undefined);
  });

  test('a name that resolves to a refused address is refused before any connection', async () => {
    const fetchLike = egressFetch({ egress: 'public-only', egressAllow: [] }, async () => [
      { address: '93.184.215.14', family: 4 },
      { address: '10.0.0.5', family: 4 },
    ]);
    await assert.rejects(fetchLike('http://mcp.example.test/mcp', { method: 'POST', body: '{}' }), (err: unknown) => {
      assert.ok(err instanceof EgressRefusedError);
      assert.match(err.message, /^mcp\.example\.test is not reachable under this tenant's egress policy: 10\.0\.0\.5 is in 10\.0\.0\.0\/8/);
      return true;
    });
  });
});
