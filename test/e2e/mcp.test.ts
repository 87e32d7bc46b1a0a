/**
 * End to end: `bin/berth mcp` against a real `bin/berth serve`, driven by the
 * MCP SDK's own client over stdio and over streamable HTTP: the tool list,
 * calls and errors, approvals by elicitation (and without it), cancellation
 * that really stops the command, progress carrying output, and the task
 * ending with its MCP session.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { hashApiKey } from '../../services/common/config.js';
import { pidsRunning, uniqueSleepSeconds, waitUntil } from '../support/host-processes.js';
import { startListeningChild, type ListeningChild } from '../../services/cli/bench/listening-child.js';
import { BERTH_BIN, REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';

type Answer = 'once' | 'deny' | 'decline';

/** Tools Berth lists for agent loops to handle themselves; an MCP client's model could never use them through Berth. */
const AGENT_LOOP = ['delegate_task', 'memory', 'session_search', 'todo_list'];

const API_KEY = 'mcp-e2e-key';
const AUTH = { requestInit: { headers: { Authorization: `Bearer ${API_KEY}` } } };

function berthTools(serve: ServeProcess, args: string[]) {
  return serve.cli(['tools', ...args], { env: { BERTH_API_KEY: API_KEY } });
}

/** An MCP client that declares elicitation and answers approval questions from `answers`, recording them. */
function elicitingClient(answers: Answer[], asked: string[]): Client {
  const client = new Client({ name: 'berth-e2e', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
  client.setRequestHandler(ElicitRequestSchema, (request) => {
    asked.push(request.params.message);
    const answer = answers.shift() ?? 'decline';
    return answer === 'decline' ? { action: 'decline' } : { action: 'accept', content: { choice: answer } };
  });
  return client;
}

function text(result: unknown): string {
  const content = (result as CallToolResult).content[0];
  assert.equal(content?.type, 'text');
  return (content as { text: string }).text;
}

function stdioTransport(serve: ServeProcess, args: string[]): StdioClientTransport {
  return new StdioClientTransport({
    command: process.execPath,
    args: [BERTH_BIN, 'mcp', '--server', serve.address, '--api-key', API_KEY, ...args],
    cwd: REPO_ROOT,
    stderr: 'pipe',
  });
}

describe('berth mcp against a real berth serve', () => {
  let serve: ServeProcess;
  let dir: string;
  let http: ListeningChild;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-e2e-mcp-'));
    const config = join(dir, 'config.yaml');
    // non_interactive: approve is what a client without elicitation gets (berth-interactive: false).
    writeFileSync(
      config,
      [
        'approvals:',
        '  mode: manual',
        '  timeout: 60',
        '  non_interactive: approve',
        'command_allowlist: []',
        // A tenant, so API keys matter: stdio gets --api-key, HTTP clients send their own Authorization.
        'allow_local_multi_tenant: true',
        'tenants:',
        `  - id: mcp-e2e`,
        `    api_key_sha256: ${hashApiKey(API_KEY)}`,
        '',
      ].join('\n'),
    );
    serve = await startServe(['--config', config]);
    // No --api-key: each HTTP session must bring its own.
    http = await startListeningChild({
      name: 'berth mcp --listen',
      args: [BERTH_BIN, 'mcp', '--listen', '127.0.0.1:0', '--server', serve.address],
      cwd: REPO_ROOT,
      env: { ...process.env, BERTH_API_KEY: '' },
    });
  });

  after(async () => {
    await http?.stop();
    await serve?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('stdio: tools as `berth tools` lists them; calls, tool errors and call failures', async () => {
    const client = new Client({ name: 'berth-e2e', version: '1.0.0' });
    await client.connect(stdioTransport(serve, ['--task', 'mcp-stdio', '--toolsets', 'terminal,file', '--disable', 'file']));
    try {
      const cli = await berthTools(serve, ['--toolsets', 'terminal,file', '--disable', 'file']);
      const expected = (JSON.parse(cli.stdout) as Array<{ function: { name: string; description: string; parameters: unknown } }>).map((t) => ({
        name: t.function.name,
        description: t.function.description,
        inputSchema: t.function.parameters,
      }));
      const { tools } = await client.listTools();
      assert.deepEqual(
        tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema })),
        expected,
      );

      const pwd = await client.callTool({ name: 'terminal', arguments: { command: `cd ${dir} && echo hi` } });
      assert.equal(pwd.isError, undefined);
      // `cwd`: the command left the shell somewhere other than where it started.
      assert.deepEqual(JSON.parse(text(pwd)), { output: 'hi', exit_code: 0, error: null, cwd: realpathSync(dir) });
      // Same task between calls: the cwd persisted.
      assert.equal(JSON.parse(text(await client.callTool({ name: 'terminal', arguments: { command: 'pwd' } }))).output, dir);

      const refused = await client.callTool({ name: 'terminal', arguments: { command: 'echo x', workdir: '/tmp;rm' } });
      assert.equal(refused.isError, true);
      assert.match(JSON.parse(text(refused)).error as string, /workdir contains disallowed character/);

      // Disabled by --disable file: not offered, not callable.
      const hidden = await client.callTool({ name: 'read_file', arguments: { path: '/etc/hostname' } });
      assert.equal(hidden.isError, true);
      assert.deepEqual(JSON.parse(text(hidden)), { error: 'Unknown tool: read_file' });

      // Offered as process_manage only; the old name still calls it.
      assert.deepEqual(tools.map((t) => t.name), ['process_manage', 'terminal']);
      for (const name of ['process_manage', 'process']) {
        const listed = await client.callTool({ name, arguments: { action: 'list' } });
        assert.equal(listed.isError, undefined, text(listed));
        assert.ok(Array.isArray(JSON.parse(text(listed)).processes), text(listed));
      }
    } finally {
      await client.close();
    }
  });

  test('stdio: agent-loop tools are hidden unless asked for; the instructions say the local backend is no sandbox', async () => {
    const plain = new Client({ name: 'berth-e2e', version: '1.0.0' });
    await plain.connect(stdioTransport(serve, ['--task', 'mcp-loop']));
    const all = new Client({ name: 'berth-e2e', version: '1.0.0' });
    await all.connect(stdioTransport(serve, ['--task', 'mcp-loop-all', '--agent-loop-tools']));
    try {
      const listed = (await plain.listTools()).tools.map((t) => t.name);
      for (const name of AGENT_LOOP) assert.ok(!listed.includes(name), `${name} hidden`);
      assert.ok(listed.includes('terminal'));
      const called = await plain.callTool({ name: 'todo_list', arguments: { todos: [] } });
      assert.deepEqual(JSON.parse(text(called)), { error: 'Unknown tool: todo_list' });
      const shown = (await all.listTools()).tools.map((t) => t.name);
      for (const name of AGENT_LOOP) assert.ok(shown.includes(name), `${name} shown with --agent-loop-tools`);
      assert.equal(
        plain.getInstructions(),
        "Tools run in the Berth task 'mcp-loop' on the Berth server's local backend: directly on the server's machine, as its user, " +
          "with no sandbox. The task's working directory, environment variables and background processes persist between calls.",
      );
    } finally {
      await plain.close();
      await all.close();
    }
  });

  test('stdio: approval by elicitation, approved and denied', async () => {
    const asked: string[] = [];
    const client = elicitingClient(['once', 'deny'], asked);
    await client.connect(stdioTransport(serve, ['--task', 'mcp-elicit']));
    try {
      const ran = join(dir, 'elicit-once');
      const approved = await client.callTool({ name: 'terminal', arguments: { command: `bash -c 'touch ${ran}; echo approved'` } });
      assert.equal(JSON.parse(text(approved)).output, 'approved');
      assert.ok(existsSync(ran));
      assert.match(asked[0] ?? '', /shell command via -c\/-lc flag/);

      const never = join(dir, 'elicit-deny');
      const denied = await client.callTool({ name: 'terminal', arguments: { command: `bash -c 'touch ${never}'` } });
      assert.equal(denied.isError, true);
      assert.match(JSON.parse(text(denied)).error as string, /^BLOCKED: User denied this command\. The user has NOT consented/);
      assert.ok(!existsSync(never));
      assert.equal(asked.length, 2);
    } finally {
      await client.close();
    }
  });

  test('stdio: a generated task id; a client without elicitation gets the non-interactive rule (here: approve)', async () => {
    const client = new Client({ name: 'berth-e2e', version: '1.0.0' });
    // No --task: the session gets a generated task id, told on stderr.
    const transport = stdioTransport(serve, []);
    let stderr = '';
    transport.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    await client.connect(transport);
    try {
      await waitUntil('berth mcp to name its task', () => /serving task mcp-[0-9a-f]{8} of /.test(stderr));
      const ran = join(dir, 'non-interactive');
      const result = await client.callTool({ name: 'terminal', arguments: { command: `bash -c 'touch ${ran}; echo ran'` } });
      assert.equal(JSON.parse(text(result)).output, 'ran');
      assert.ok(existsSync(ran));
    } finally {
      await client.close();
    }
  });

  test('stdio: progress carries output; cancelling a call stops its command; closing ends the task', async () => {
    const client = new Client({ name: 'berth-e2e', version: '1.0.0' });
    await client.connect(stdioTransport(serve, ['--task', 'mcp-cancel']));
    try {
      const messages: string[] = [];
      const streamed = await client.callTool({ name: 'terminal', arguments: { command: 'echo first; sleep 0.2; echo second' } }, undefined, {
        onprogress: (p) => messages.push(p.message ?? ''),
      });
      assert.equal(JSON.parse(text(streamed)).output, 'first\nsecond');
      assert.match(messages.join(''), /first[\s\S]*second/);

      const seconds = uniqueSleepSeconds(60);
      const marker = join(dir, 'cancelled-marker');
      const abort = new AbortController();
      const call = client.callTool({ name: 'terminal', arguments: { command: `echo started; sleep ${seconds}; touch ${marker}` } }, undefined, {
        signal: abort.signal,
        onprogress: (p) => {
          if (p.message?.includes('started')) abort.abort();
        },
      });
      await assert.rejects(call);
      await waitUntil('the cancelled command to stop', () => pidsRunning(`sleep ${seconds}`).length === 0);
      assert.ok(!existsSync(marker));

      const bg = uniqueSleepSeconds(300);
      const started = await client.callTool({ name: 'terminal', arguments: { command: `sleep ${bg}`, background: true } });
      assert.equal(JSON.parse(text(started)).output, 'Background process started');
      await waitUntil('the background sleep to start', () => pidsRunning(`sleep ${bg}`).length > 0);
      await client.close();
      await waitUntil('the end of the MCP session to end the task', () => pidsRunning(`sleep ${bg}`).length === 0);
    } finally {
      await client.close();
    }
  });

  test('HTTP: a request naming another host is refused (DNS rebinding), an unknown session gets 404', async () => {
    const url = new URL(http.address);
    const post = (headers: Record<string, string>) =>
      new Promise<number>((resolve, reject) => {
        const req = request(
          { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers } },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on('error', reject);
        req.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } } }));
      });
    assert.equal(await post({ host: `attacker.example:${url.port}` }), 403);
    assert.equal(await post({ 'mcp-session-id': 'no-such-session' }), 404);
    assert.equal(await post({}), 200);
  });

  test('HTTP: a session without the Authorization of a Berth tenant cannot list or call tools', async () => {
    const anonymous = new Client({ name: 'berth-e2e', version: '1.0.0' });
    await anonymous.connect(new StreamableHTTPClientTransport(new URL(http.address)));
    try {
      await assert.rejects(anonymous.listTools(), /UNAUTHENTICATED|API key/);
      const refused = await anonymous.callTool({ name: 'terminal', arguments: { command: 'echo no' } });
      assert.equal(refused.isError, true);
      assert.match(text(refused), /UNAUTHENTICATED/);
    } finally {
      await anonymous.close();
    }
  });

  test('HTTP: one task per MCP session; calls, elicitation, cancellation, and close ending the task', async () => {
    const url = new URL(http.address);
    const asked: string[] = [];
    const a = elicitingClient(['once'], asked);
    const b = new Client({ name: 'berth-e2e', version: '1.0.0' });
    const ta = new StreamableHTTPClientTransport(url, AUTH);
    await a.connect(ta);
    await b.connect(new StreamableHTTPClientTransport(url, AUTH));
    try {
      assert.deepEqual(
        (await a.listTools()).tools.map((t) => t.name),
        (JSON.parse((await berthTools(serve, [])).stdout) as Array<{ function: { name: string } }>)
          .map((t) => t.function.name)
          .filter((name) => !AGENT_LOOP.includes(name)),
      );
      // Sessions are separate tasks: a's cwd is not b's.
      await a.callTool({ name: 'terminal', arguments: { command: `cd ${dir}` } });
      assert.equal(JSON.parse(text(await a.callTool({ name: 'terminal', arguments: { command: 'pwd' } }))).output, dir);
      assert.notEqual(JSON.parse(text(await b.callTool({ name: 'terminal', arguments: { command: 'pwd' } }))).output, dir);

      const ran = join(dir, 'http-once');
      const approved = await a.callTool({ name: 'terminal', arguments: { command: `bash -c 'touch ${ran}; echo ok'` } });
      assert.equal(JSON.parse(text(approved)).output, 'ok');
      assert.ok(existsSync(ran));
      assert.equal(asked.length, 1);

      const failed = await b.callTool({ name: 'read_file', arguments: { path: join(dir, 'absent') } });
      assert.equal(failed.isError, true);

      const seconds = uniqueSleepSeconds(60);
      const abort = new AbortController();
      const messages: string[] = [];
      const call = b.callTool({ name: 'terminal', arguments: { command: `echo started; sleep ${seconds}` } }, undefined, {
        signal: abort.signal,
        onprogress: (p) => {
          messages.push(p.message ?? '');
          if (p.message?.includes('started')) abort.abort();
        },
      });
      await assert.rejects(call);
      assert.match(messages.join(''), /started/);
      await waitUntil('the cancelled command to stop', () => pidsRunning(`sleep ${seconds}`).length === 0);

      const bg = uniqueSleepSeconds(300);
      await a.callTool({ name: 'terminal', arguments: { command: `sleep ${bg}`, background: true } });
      await waitUntil('the background sleep to start', () => pidsRunning(`sleep ${bg}`).length > 0);
      await ta.terminateSession();
      await a.close();
      await waitUntil('closing the MCP session to end its task', () => pidsRunning(`sleep ${bg}`).length === 0);
      // b's session is untouched.
      assert.equal(JSON.parse(text(await b.callTool({ name: 'terminal', arguments: { command: 'echo b-alive' } }))).output, 'b-alive');
    } finally {
      await a.close();
      await b.close();
    }
  });
});

describe('berth mcp without a Berth server', () => {
  test('it starts and says so; tools/list is a JSON-RPC server error with the fix, a call an error result with it', async () => {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [BERTH_BIN, 'mcp', '--server', '127.0.0.1:1', '--task', 'mcp-nobody'],
      cwd: REPO_ROOT,
      stderr: 'pipe',
    });
    let stderr = '';
    transport.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    const client = new Client({ name: 'berth-e2e', version: '1.0.0' });
    await client.connect(transport);
    try {
      const hint = /cannot reach the Berth server at 127\.0\.0\.1:1 \(.*\); is 'berth serve' running\? Set --server or BERTH_SERVER/;
      await waitUntil('berth mcp to say the server is unreachable', () => hint.test(stderr));
      await assert.rejects(client.listTools(), (err: unknown) => {
        assert.ok(err instanceof McpError, String(err));
        assert.equal(err.code, -32000, 'a server error, not gRPC status 14');
        assert.match(err.message, hint);
        assert.deepEqual(err.data, { grpc_status: 'UNAVAILABLE' });
        return true;
      });
      const called = await client.callTool({ name: 'terminal', arguments: { command: 'true' } });
      assert.equal(called.isError, true);
      assert.match(JSON.parse(text(called)).error as string, hint);
      assert.match(client.getInstructions() ?? '', /Whether they run in a sandbox depends on the Berth server's backend/);
    } finally {
      await client.close();
    }
  });
});
