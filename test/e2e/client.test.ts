/**
 * End to end: the `berth/client` TypeScript client against a real
 * `bin/berth serve` — every method family, the Session iterator with
 * approvals answered both ways, retries (and their absence), TLS wiring, and
 * the package's exports from a packed tarball in a fresh project.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ServerCredentials } from '@grpc/grpc-js';
import { createServer as createGrpcServer } from 'nice-grpc';
import { BerthClient, BerthError, SessionStream, Status, isToolError, type SessionEvent } from '../../services/client/index.js';
import { hashApiKey } from '../../services/common/config.js';
import { DispatcherDefinition } from '../../services/gen/berth/v1/dispatcher.js';
import { pidsRunning, uniqueSleepSeconds, waitUntil } from '../support/host-processes.js';
import { startListeningChild } from '../../services/cli/bench/listening-child.js';
import { REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';

const run = promisify(execFile);
const API_KEY = 'client-e2e-key';

/** A command that needs approval (bash -c) and leaves a marker when it runs. */
function marking(dir: string, name: string): { command: string; marker: string } {
  const marker = join(dir, name);
  return { command: `bash -c 'echo ran > ${marker}; echo ran-${name}'`, marker };
}

async function collect(events: AsyncIterable<SessionEvent>, onApproval?: (ev: Extract<SessionEvent, { type: 'approval' }>) => void) {
  const seen: SessionEvent[] = [];
  for await (const ev of events) {
    seen.push(ev);
    if (ev.type === 'approval') onApproval?.(ev);
  }
  const last = seen.at(-1);
  assert.equal(last?.type, 'result', 'a run ends with its result');
  return { seen, result: (last as Extract<SessionEvent, { type: 'result' }>).result as Record<string, unknown> };
}

describe('berth/client against a real berth serve', () => {
  let serve: ServeProcess;
  let dir: string;
  let berth: BerthClient;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-e2e-client-'));
    const config = join(dir, 'config.yaml');
    writeFileSync(
      config,
      [
        'approvals:',
        '  mode: manual',
        '  timeout: 60',
        'command_allowlist: []',
        'allow_local_multi_tenant: true',
        'tenants:',
        '  - id: client-e2e',
        `    api_key_sha256: ${hashApiKey(API_KEY)}`,
        '',
      ].join('\n'),
    );
    serve = await startServe(['--config', config]);
    berth = new BerthClient(serve.address, { apiKey: API_KEY });
  });

  after(async () => {
    berth.close();
    await serve.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('listTools gives what `berth tools` prints, toolset flags included', async () => {
    const cli = await serve.cli(['tools', '--toolsets', 'terminal,file', '--disable', 'file'], { env: { BERTH_API_KEY: API_KEY } });
    assert.equal(cli.code, 0, cli.stderr);
    const listing = await berth.listTools({ toolsets: ['terminal', 'file', 'no-such-set'], disable: ['file'] });
    assert.deepEqual(listing.tools, JSON.parse(cli.stdout));
    assert.deepEqual(listing.tools.map((t) => t.function.name), ['process_manage', 'terminal']);
    assert.deepEqual(listing.unknownToolsets, ['no-such-set']);
  });

  test('the API key selects the tenant; without a known one every call is refused', async () => {
    for (const apiKey of [undefined, 'not-a-key']) {
      using anonymous = new BerthClient(serve.address, apiKey === undefined ? {} : { apiKey });
      await assert.rejects(anonymous.listTools(), (err: unknown) => err instanceof BerthError && err.code === Status.UNAUTHENTICATED);
      await assert.rejects(anonymous.task('t').terminal({ command: 'true' }), (err: unknown) => err instanceof BerthError && err.code === Status.UNAUTHENTICATED);
    }
  });

  test('typed tool methods keep the task environment and parse results', async () => {
    const task = berth.task('client-typed');
    const cd = await task.terminal({ command: `cd ${dir} && export CLIENT_VAR=kept` });
    assert.equal(cd.exit_code, 0);
    // The executor's report of where the command started and ended crosses the gRPC hop: `cwd` when it moved.
    assert.equal(cd.cwd, realpathSync(dir));
    const pwd = await task.terminal({ command: 'pwd; echo $CLIENT_VAR' });
    assert.equal(pwd.output, `${dir}\nkept`);
    assert.equal(pwd.error, null);
    assert.ok(!('cwd' in pwd), JSON.stringify(pwd));

    const written = await task.writeFile({ path: join(dir, 'hello.txt'), content: 'one\ntwo\n' });
    assert.ok(!isToolError(written), JSON.stringify(written));
    const read = await task.readFile({ path: join(dir, 'hello.txt'), offset: 2 });
    assert.equal(read.content, '2|two');
    assert.equal(read.total_lines, 2);
    const found = await task.searchFiles({ pattern: 'tw', path: dir });
    assert.equal(found.matches?.[0]?.content, 'two');

    // processManage, and the deprecated process() kept for code written against the old tool name.
    const listed = (await task.processManage({ action: 'list' })) as { processes?: unknown[] };
    assert.ok(Array.isArray(listed.processes), JSON.stringify(listed));
    assert.deepEqual(await task.process({ action: 'list' }), listed);

    // Tool failures are results the model reads, not exceptions.
    const missing = await task.readFile({ path: join(dir, 'absent.txt') });
    assert.ok(isToolError(missing));
    const unknown = await task.call('no_such_tool', {});
    assert.deepEqual(unknown, { error: 'Unknown tool: no_such_tool' });
    assert.equal(await task.callRaw('terminal', { command: 'echo raw' }), '{"output":"raw","exit_code":0,"error":null}');
  });

  test('session run: output as it comes, then the result', async () => {
    await using session = berth.task('client-stream').session();
    const { seen, result } = await collect(session.run('terminal', { command: 'echo first; sleep 0.2; echo second' }));
    const output = seen.filter((e) => e.type === 'output').map((e) => (e as { text: string }).text).join('');
    assert.match(output, /first[\s\S]*second/);
    assert.equal(result.output, 'first\nsecond');
  });

  test('session run: an approval answered "once" runs the command, "deny" does not', async () => {
    await using session = berth.task('client-approve', { sessionId: 'client-approve' }).session();
    const ok = marking(dir, 'once');
    const asked: string[] = [];
    const approved = await collect(session.run('terminal', { command: ok.command }), (ev) => {
      asked.push(ev.request.description);
      assert.deepEqual(ev.request.choices, ['once', 'session', 'always', 'deny']);
      ev.answer('once');
    });
    assert.deepEqual(asked, ['shell command via -c/-lc flag']);
    assert.equal(approved.result.output, 'ran-once');
    assert.ok(existsSync(ok.marker));

    const no = marking(dir, 'deny');
    const denied = await collect(session.run('terminal', { command: no.command }), (ev) => ev.answer('deny'));
    assert.equal(denied.result.status, 'blocked');
    assert.match(String(denied.result.error), /^BLOCKED: User denied this command\. The user has NOT consented/);
    assert.ok(!existsSync(no.marker));
  });

  test('unary call parks a dangerous command; approve runs it', async () => {
    const task = berth.task('client-unary-approve');
    const ok = marking(dir, 'unary');
    const pending = await task.terminal({ command: ok.command });
    assert.equal(pending.status, 'pending_approval');
    assert.ok(!existsSync(ok.marker));
    const approved = JSON.parse(await task.approve(String(pending.approval_id), 'once')) as Record<string, unknown>;
    assert.equal(approved.output, 'ran-unary');
    await assert.rejects(task.approve('appr_000000000000000000000000', 'once'), (err: unknown) => {
      assert.ok(err instanceof BerthError);
      assert.equal(err.code, Status.NOT_FOUND);
      return true;
    });
  });

  test('interrupt and abort stop the running command; end releases background processes', async () => {
    const task = berth.task('client-interrupt');
    await using session = task.session();
    const seconds = uniqueSleepSeconds(60);
    const running = session.run('terminal', { command: `echo started; sleep ${seconds}` });
    const events = running[Symbol.asyncIterator]();
    const first = await events.next();
    assert.equal((first.value as SessionEvent).type, 'output');
    assert.ok(pidsRunning(`sleep ${seconds}`).length > 0);
    assert.equal(await task.interrupt(), 1);
    let last: SessionEvent | undefined;
    for (let r = await events.next(); !r.done; r = await events.next()) last = r.value;
    assert.equal(last?.type, 'result');
    assert.equal((last as { result: { exit_code: number } }).result.exit_code, 130);
    await waitUntil('the interrupted sleep to exit', () => pidsRunning(`sleep ${seconds}`).length === 0);

    // Aborting a unary call cancels it, and the server stops the command.
    const cancelled = uniqueSleepSeconds(60);
    const abort = new AbortController();
    const unary = task.terminal({ command: `sleep ${cancelled}` }, { signal: abort.signal });
    await waitUntil('the unary sleep to start', () => pidsRunning(`sleep ${cancelled}`).length > 0);
    abort.abort();
    await assert.rejects(unary);
    await waitUntil('the cancelled unary sleep to exit', () => pidsRunning(`sleep ${cancelled}`).length === 0);

    const bg = uniqueSleepSeconds(300);
    const started = await task.terminal({ command: `sleep ${bg}`, background: true });
    assert.equal(started.output, 'Background process started');
    await waitUntil('the background sleep to start', () => pidsRunning(`sleep ${bg}`).length > 0);
    assert.equal(await task.end(), true);
    await waitUntil('EndTask to stop the background sleep', () => pidsRunning(`sleep ${bg}`).length === 0);
    assert.equal(await task.end(), false);
  });

  test('a call that fails as a call throws BerthError; the stream stays usable', async () => {
    await assert.rejects(berth.task('bad id!').terminal({ command: 'true' }), (err: unknown) => {
      assert.ok(err instanceof BerthError, String(err));
      assert.equal(err.status, 'INVALID_ARGUMENT');
      assert.match(err.details, /task_id must be/);
      return true;
    });
    const stream = new SessionStream(berth.rpc, { metadata: berth.metadata() });
    const call = (taskId: string) => stream.start({ name: 'terminal', argumentsJson: '{"command":"echo still-here"}', taskId, sessionId: '' });
    await assert.rejects(call('bad id!').result(), (err: unknown) => err instanceof BerthError && err.code === Status.INVALID_ARGUMENT);
    assert.equal((await call('client-errors').result()).resultJson, '{"output":"still-here","exit_code":0,"error":null}');
    await stream.close();
    await assert.rejects(call('client-errors').result(), /this session is closed; open a new one/);
  });

  test('a packed tarball in a fresh project: berth/client imports and type-checks, bin/berth serves', async () => {
    const project = mkdtempSync(join(tmpdir(), 'berth-pack-'));
    try {
      const { stdout } = await run('npm', ['pack', '--silent', '--pack-destination', project], { cwd: REPO_ROOT, maxBuffer: 64 * 1024 * 1024 });
      const tarball = join(project, stdout.trim().split('\n').at(-1) ?? '');
      // Only what a user runs: no compiled tests, no build context of the deploy image (hundreds of MB once built).
      const listing = (await run('tar', ['-tzf', tarball], { maxBuffer: 64 * 1024 * 1024 })).stdout.split('\n');
      assert.ok(listing.includes('package/dist/services/cli/main.js'), 'the CLI is packed');
      assert.ok(listing.includes('package/dist/agent/berth_agent.pyz'), "the exec agent's archive is packed");
      assert.deepEqual(listing.filter((f) => /^package\/dist\/(?!services\/|agent\/)/.test(f)), [], 'nothing else of dist/ is packed');
      const installed = join(project, 'node_modules', 'berth');
      mkdirSync(installed, { recursive: true });
      await run('tar', ['-xzf', tarball, '-C', installed, '--strip-components=1']);
      // The package's dependencies as an install would provide them, without a registry.
      symlinkSync(join(REPO_ROOT, 'node_modules'), join(installed, 'node_modules'));
      writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'app', type: 'module', private: true }));
      writeFileSync(
        join(project, 'app.mjs'),
        [
          "import { BerthClient } from 'berth/client';",
          'const berth = new BerthClient(process.argv[2], { apiKey: process.env.BERTH_API_KEY });',
          "const r = await berth.task('packed').terminal({ command: 'echo from-tarball' });",
          'console.log(JSON.stringify(r));',
          'berth.close();',
        ].join('\n'),
      );
      const app = await run(process.execPath, ['app.mjs', serve.address], { cwd: project, env: { ...process.env, BERTH_API_KEY: API_KEY } });
      assert.equal(JSON.parse(app.stdout).output, 'from-tarball');

      // The package's own bin serves too, and the packed client talks to it.
      const stateRoot = join(project, 'state');
      const packed = await startListeningChild({
        name: 'packed berth serve',
        args: [join(installed, 'bin', 'berth'), 'serve', '--port', '0'],
        cwd: project,
        env: { ...process.env, BERTH_STATE_ROOT: stateRoot, BERTH_CONFIG: '' },
      });
      try {
        const viaPackedBin = await run(process.execPath, ['app.mjs', packed.address], { cwd: project });
        assert.equal(JSON.parse(viaPackedBin.stdout).output, 'from-tarball');
      } finally {
        await packed.stop();
      }

      // The types resolve through `exports` too.
      writeFileSync(
        join(project, 'app.ts'),
        [
          "import { BerthClient } from 'berth/client';",
          "const r = await new BerthClient('127.0.0.1:1').task('t').terminal({ command: 'pwd' });",
          'const n: number = r.exit_code;',
          'export { n };',
        ].join('\n'),
      );
      writeFileSync(
        join(project, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2022', strict: true, noEmit: true, skipLibCheck: true, types: ['node'], typeRoots: [join(installed, 'node_modules', '@types')] },
          files: ['app.ts'],
        }),
      );
      const tsc = await run(process.execPath, [join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', project]).catch((e: { stdout?: string }) => {
        throw new Error(`tsc failed on a berth/client import:\n${e.stdout ?? String(e)}`);
      });
      assert.equal(tsc.stdout, '');
    } finally {
      rmSync(project, { recursive: true, force: true });
    }
  });
});

/** A port nothing listens on yet. */
async function freePort(): Promise<number> {
  const probe = createNetServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

describe('berth/client retries', () => {
  test('listTools waits out a server that comes up after the first attempt', async () => {
    const port = await freePort();
    let serve: ServeProcess | undefined;
    let starting: Promise<ServeProcess> | undefined;
    const retries: number[] = [];
    const berth = new BerthClient(`127.0.0.1:${port}`, {
      retry: {
        maxAttempts: 100,
        initialBackoffMs: 100,
        maxBackoffMs: 500,
        onRetry: ({ attempt, error }) => {
          assert.equal(error.code, Status.UNAVAILABLE);
          retries.push(attempt);
          starting ??= startServe(['--port', String(port)]).then((s) => (serve = s));
        },
      },
      // Reconnect promptly once the server is there, rather than after grpc-js's default backoff.
      channelOptions: { 'grpc.initial_reconnect_backoff_ms': 100, 'grpc.max_reconnect_backoff_ms': 500 },
    });
    try {
      const listing = await berth.listTools({ toolsets: ['terminal'] });
      assert.deepEqual(listing.tools.map((t) => t.function.name), ['process_manage', 'terminal']);
      assert.equal(retries[0], 1, 'the first attempt failed and was retried');
    } finally {
      berth.close();
      serve ??= await starting;
      await serve?.stop();
    }
  });

  test('a terminal call is sent once: UNAVAILABLE comes back without a retry', async () => {
    const port = await freePort();
    const retried: string[] = [];
    const berth = new BerthClient(`127.0.0.1:${port}`, { retry: { maxAttempts: 5, onRetry: ({ method }) => retried.push(method) } });
    try {
      await assert.rejects(berth.task('t').terminal({ command: 'echo once' }), (err: unknown) => {
        assert.ok(err instanceof BerthError);
        assert.equal(err.code, Status.UNAVAILABLE);
        return true;
      });
      assert.deepEqual(retried, []);
      // The same client does retry what is safe to repeat.
      await assert.rejects(berth.task('t').readFile({ path: '/etc/hostname' }));
      assert.deepEqual(retried, ['CallTool/read_file', 'CallTool/read_file', 'CallTool/read_file', 'CallTool/read_file']);
    } finally {
      berth.close();
    }
  });
});

describe('berth/client TLS options', () => {
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-client-tls-'));
    const ssl = (args: string[]) => run('openssl', args, { cwd: dir });
    await ssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=test-ca', '-keyout', 'ca.key', '-out', 'ca.pem']);
    for (const name of ['server', 'client']) {
      await ssl(['req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.csr`]);
      writeFileSync(join(dir, `${name}.ext`), name === 'server' ? 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' : 'extendedKeyUsage=clientAuth\n');
      await ssl(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-extfile', `${name}.ext`, '-out', `${name}.pem`]);
    }
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('CA, client certificate and key, as paths or as PEM text, reach a server that requires them', async () => {
    // A test double of the dispatcher: only ListTools, behind mTLS (the real server's TLS is configured elsewhere).
    const server = createGrpcServer();
    server.add(DispatcherDefinition, {
      listTools: async () => ({ toolsJson: '[]', unknownToolsets: ['seen-over-mtls'] }),
      callTool: async () => ({ resultJson: '{}' }),
      async *session() {},
      approve: async () => ({ resultJson: '{}' }),
      interrupt: async () => ({ interrupted: 0 }),
      async *taskEvents() {},
      endTask: async () => ({ released: false }),
      suspend: async () => ({ suspended: false, processesKept: false }),
      resume: async () => ({ resumed: false }),
      snapshot: async () => ({}),
      fork: async () => ({ taskId: '' }),
      listSnapshots: async () => ({ snapshots: [] }),
      deleteSnapshot: async () => ({ deleted: false }),
    });
    const read = (f: string) => readFileSync(join(dir, f));
    const port = await server.listen(
      '127.0.0.1:0',
      ServerCredentials.createSsl(read('ca.pem'), [{ private_key: read('server.key'), cert_chain: read('server.pem') }], true),
    );
    try {
      const byPath = new BerthClient(`127.0.0.1:${port}`, {
        tls: { ca: join(dir, 'ca.pem'), cert: join(dir, 'client.pem'), key: join(dir, 'client.key') },
        retry: { maxAttempts: 1 },
      });
      assert.deepEqual((await byPath.listTools()).unknownToolsets, ['seen-over-mtls']);
      byPath.close();
      const byText = new BerthClient(`localhost:${port}`, {
        tls: { ca: read('ca.pem').toString(), cert: read('client.pem').toString(), key: read('client.key').toString() },
        retry: { maxAttempts: 1 },
      });
      assert.deepEqual((await byText.listTools()).unknownToolsets, ['seen-over-mtls']);
      byText.close();
      // Without the client certificate the server refuses the handshake.
      const noCert = new BerthClient(`127.0.0.1:${port}`, { tls: { ca: join(dir, 'ca.pem') }, retry: { maxAttempts: 1 } });
      await assert.rejects(noCert.listTools(), (err: unknown) => err instanceof BerthError && err.code === Status.UNAVAILABLE);
      noCert.close();
      assert.throws(() => new BerthClient('127.0.0.1:1', { tls: { ca: join(dir, 'missing.pem') } }), /tls\.ca: cannot read/);
      assert.throws(() => new BerthClient('127.0.0.1:1', { tls: { cert: join(dir, 'client.pem') } }), /tls\.cert and tls\.key go together/);
    } finally {
      await server.shutdown();
    }
  });
});
