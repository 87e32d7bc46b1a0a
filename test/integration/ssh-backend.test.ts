/**
 * The ssh backend against a real OpenSSH server in a container: what the
 * conformance suite cannot check from inside (the server's view of leftover
 * processes, dropped connections, host keys, authentication, load).
 */
import assert from 'node:assert/strict';
import { readFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import { BerthError, UnavailableError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { SshBackend, type SshBackendOptions } from '../../services/executor/backends/ssh/ssh-backend.js';
import { SshConnectError } from '../../services/executor/backends/ssh/ssh-errors.js';
import { sshRoundTrips } from '../../services/executor/backends/ssh/ssh-round-trips.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { countProcessesScript } from '../../services/conformance/process-probe.js';
import { generateKeyPair, startSshd, type StartedSshd } from '../../services/cli/bench/sshd-container.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe('ssh backend against a real sshd', { timeout: 300_000 }, () => {
  let sshd: StartedSshd;
  let stateDir: string;
  let backend: SshBackend;
  let envs: TaskEnvironments;
  const used: TaskKey[] = [];
  let taskNo = 0;

  const options = (extra: Partial<SshBackendOptions> = {}): SshBackendOptions => ({
    host: sshd.host,
    port: sshd.port,
    user: sshd.user,
    privateKey: sshd.keys.privateKey,
    keyName: 'test-key',
    knownHostsPath: path.join(stateDir, 'known_hosts'),
    pollIntervalMs: 100,
    connectTimeoutMs: 10_000,
    ...extra,
  });
  const task = (tenant = 't1'): TaskKey => {
    const key = { tenant, taskId: `task-${++taskNo}` };
    used.push(key);
    return key;
  };
  /** Live processes on the server with an argument equal to `arg`, seen from the container itself. */
  const serverProcesses = async (arg: string) => {
    const r = await sshd.exec(['bash', '-c', countProcessesScript(arg)]);
    return Number(/count=(\d+)/.exec(r.output)?.[1] ?? NaN);
  };
  const untilServer = async (check: () => Promise<boolean>, what: string, timeoutMs = 15_000) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) assert.fail(`${what} did not happen within ${timeoutMs} ms`);
      await sleep(100);
    }
  };

  before(async () => {
    sshd = await startSshd();
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-ssh-test-'));
    backend = new SshBackend(options());
    envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
  });

  afterEach(async () => {
    await Promise.all(used.splice(0).map((key) => envs.release(key)));
  });

  after(async () => {
    await envs?.closeAll();
    await backend?.close();
    await sshd?.stop();
    await rm(stateDir, { recursive: true, force: true });
  });

  it('keeps cwd and env across calls in a per-task directory on the host', async () => {
    const key = task();
    const first = await envs.exec(key, { command: 'pwd; cd /tmp && export GREETING=hi', timeoutMs: 20_000 });
    assert.match(first.output, /^\/home\/sandbox\/\.berth\/tasks\/[0-9a-f]{32}\/work\n$/);
    const second = await envs.exec(key, { command: 'pwd; echo "$GREETING"', timeoutMs: 20_000 });
    assert.equal(second.output, '/tmp\nhi\n');
  });

  it('pins the host key on first contact (accept-new) in known_hosts', async () => {
    await envs.exec(task(), { command: 'true', timeoutMs: 20_000 });
    const text = await readFile(path.join(stateDir, 'known_hosts'), 'utf8');
    assert.match(text, new RegExp(`^\\[127\\.0\\.0\\.1\\]:${sshd.port} ssh-ed25519 AAAA\\S+\\n$`));
  });

  it('shares one connection per tenant and opens another for another tenant', async () => {
    const a1 = task('tenant-a');
    const a2 = task('tenant-a');
    const b1 = task('tenant-b');
    await Promise.all([a1, a2, b1].map((k) => envs.exec(k, { command: 'true', timeoutMs: 20_000 })));
    assert.equal(backend.connectionFor('tenant-a'), backend.connectionFor('tenant-a'));
    assert.notEqual(backend.connectionFor('tenant-a'), backend.connectionFor('tenant-b'));
    const sessions = await sshd.exec(['bash', '-c', 'pgrep -c -f "^sshd: sandbox"']);
    assert.ok(Number(sessions.output.trim()) >= 2, sessions.output);
  });

  it('on timeout kills the remote process group: nothing is left on the server', async () => {
    const key = task();
    const seconds = String(800_000 + Math.floor(Math.random() * 99_999));
    const r = await envs.exec(key, {
      command: `echo started; (sleep ${seconds}; echo child) & sleep ${seconds}`,
      timeoutMs: 1500,
    });
    assert.equal(r.exitCode, 124);
    assert.match(r.output, /started/);
    assert.equal(await serverProcesses(seconds), 0);
  });

  it('reconnects transparently after sshd restarts (all connections dropped)', async () => {
    const key = task();
    await envs.exec(key, { command: 'cd / && export KEEP=yes', timeoutMs: 20_000 });
    const connection = backend.connectionFor('t1');
    const before = connection.generation;
    await sshd.restartSshd();
    const r = await envs.exec(key, { command: 'pwd; echo "$KEEP"', timeoutMs: 20_000 });
    assert.equal(r.output, '/\nyes\n');
    assert.ok(connection.generation > before, 'a new connection was made');
    // Files work over the new connection's SFTP session too.
    await envs.writeFile(key, '/tmp/after-reconnect.txt', 'ok');
    assert.equal((await envs.readFile(key, '/tmp/after-reconnect.txt')).content.toString(), 'ok');
  });

  it('keeps a background process running across a dropped connection and polls it afterwards', async () => {
    const key = task();
    const started = await envs.startBackground(key, {
      command: 'for i in $(seq 1 25); do echo "tick $i"; sleep 0.2; done; echo finished; exit 7',
    });
    await sleep(1000);
    await sshd.restartSshd();
    const waited = JSON.parse(
      await envs.process(key, { action: 'wait', sessionId: started.sessionId, timeoutMs: 30_000 }),
    ) as { status: string; exit_code: number; output: string };
    assert.equal(waited.status, 'exited');
    assert.equal(waited.exit_code, 7);
    const log = JSON.parse(await envs.process(key, { action: 'log', sessionId: started.sessionId })) as { output: string };
    const ticks = [...log.output.matchAll(/^tick (\d+)$/gm)].map((m) => Number(m[1]));
    assert.deepEqual(ticks, Array.from({ length: 25 }, (_, i) => i + 1), 'no output lost or repeated');
    assert.match(log.output, /finished/);
  });

  it('stops a foreground command whose connection drops, and says so', async () => {
    const key = task();
    const seconds = String(700_000 + Math.floor(Math.random() * 99_999));
    await envs.exec(key, { command: 'true', timeoutMs: 20_000 });
    // Settled into a value at once, so the rejection is never unhandled while sshd restarts.
    const outcome = envs.exec(key, { command: `echo go; sleep ${seconds}`, timeoutMs: 60_000 }).then(
      (result) => result,
      (err: unknown) => err,
    );
    await untilServer(async () => (await serverProcesses(seconds)) === 1, 'the command starting');
    await sshd.restartSshd();
    const err = await outcome;
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, /was lost while the command ran/);
    await untilServer(async () => (await serverProcesses(seconds)) === 0, 'the orphaned command being killed');
  });

  type ExecResult = Awaited<ReturnType<TaskEnvironments['exec']>>;
  /**
   * Holds the next exec agent's start (its python3 waits for a release file), loses the current agent with
   * `lose(call)`, interrupts while the new one is held, and checks that the command never runs.
   */
  const interruptWhileAgentRestarts = async (lose: (startCall: () => Promise<ExecResult>) => Promise<{ call: Promise<ExecResult> }>) => {
    const key = task();
    await envs.exec(key, { command: 'true', timeoutMs: 20_000 });
    const marker = `/tmp/berth-never-${taskNo}-${process.pid}`;
    const shim = '/usr/local/bin/python3';
    await sshd.exec(['sh', '-c', `printf '#!/bin/sh\\ntouch /tmp/berth-agent-held\\nwhile [ ! -e /tmp/berth-agent-release ]; do sleep 0.05; done\\nexec /usr/bin/python3 "$@"\\n' > ${shim} && chmod 755 ${shim}`], 'root');
    try {
      const { call } = await lose(() => envs.exec(key, { command: `touch ${marker}`, timeoutMs: 60_000 }));
      await untilServer(async () => (await sshd.exec(['test', '-e', '/tmp/berth-agent-held'])).exitCode === 0, 'the new agent being held');
      assert.equal(envs.interrupt(key), 1);
      const r = await call;
      assert.deepEqual([r.exitCode, r.interrupted], [130, true]);
      await sshd.exec(['touch', '/tmp/berth-agent-release'], 'root');
      // The next call runs on a new agent (the held one may have run out of time to say hello while held: then
      // the call after starts another); the interrupted command never ran on any.
      let after: ExecResult | undefined;
      for (let attempt = 0; attempt < 3 && !after; attempt++) {
        after = await envs.exec(key, { command: 'echo up', timeoutMs: 30_000 }).catch((err: unknown) => {
          if (!(err instanceof UnavailableError)) throw err;
          return undefined;
        });
      }
      assert.equal(after?.output, 'up\n');
      assert.notEqual((await sshd.exec(['test', '-e', marker])).exitCode, 0, 'the interrupted command never ran');
    } finally {
      await sshd.exec(['rm', '-f', shim, '/tmp/berth-agent-held', '/tmp/berth-agent-release'], 'root');
    }
  };

  it('an interrupt while a lost exec agent is restarted ends the command, which never runs', async () => {
    await interruptWhileAgentRestarts(async (startCall) => {
      await sshd.exec(['pkill', '-KILL', '-f', 'agent-.*--stdio'], 'root');
      return { call: startCall() };
    });
  });

  it('an interrupt while the agent a command was sent to is replaced ends the command, which never runs', async () => {
    // The agent is stopped, so the command waits on it; its loss then sends the command on to a new agent
    // (the retry of a request that got nowhere), whose start is held.
    await interruptWhileAgentRestarts(async (startCall) => {
      await sshd.exec(['pkill', '-STOP', '-f', 'agent-.*--stdio'], 'root');
      const call = startCall();
      await sleep(500);
      await sshd.exec(['pkill', '-KILL', '-f', 'agent-.*--stdio'], 'root');
      return { call };
    });
  });

  it("runs 100 commands concurrently across 10 tasks of one tenant (one agent channel each, on the tenant's connections)", async () => {
    const keys = Array.from({ length: 10 }, () => task('load'));
    const started = Date.now();
    const results = await Promise.all(
      keys.flatMap((key, t) =>
        Array.from({ length: 10 }, async (_, c) => {
          const r = await envs.exec(key, { command: `echo "$((${t} * 100 + ${c}))"`, timeoutMs: 120_000 });
          return { r, want: `${t * 100 + c}\n` };
        }),
      ),
    );
    const elapsedMs = Date.now() - started;
    for (const { r, want } of results) assert.deepEqual([r.output, r.exitCode], [want, 0]);
    console.log(`# 100 commands over 10 tasks of one tenant: ${elapsedMs} ms`);
  });

  it('runs a background command under a terminal', async () => {
    const key = task();
    const started = await envs.startBackground(key, { command: 'tty; test -t 0 && echo stdin-is-a-tty', pty: true });
    const waited = JSON.parse(
      await envs.process(key, { action: 'wait', sessionId: started.sessionId, timeoutMs: 20_000 }),
    ) as { exit_code: number; output: string };
    assert.equal(waited.exit_code, 0, waited.output);
    assert.match(waited.output, /^\/dev\/pts\/\d+$/m);
    assert.match(waited.output, /stdin-is-a-tty/);
  });

  it('measures round trips on an open connection', async () => {
    const plain = await sshRoundTrips(backend.connectionFor('bench'), 20);
    const wrapped = await sshRoundTrips(backend.connectionFor('bench'), 20, { mode: 'wrapped' });
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
    assert.equal(plain.length, 20);
    console.log(`# ssh round trip p50: plain ${median(plain).toFixed(1)} ms, setsid-wrapped ${median(wrapped).toFixed(1)} ms`);
  });

  describe('preflight errors say what failed', () => {
    const connectFails = async (extra: Partial<SshBackendOptions>, reason: string, code: string, message: RegExp) => {
      const b = new SshBackend(options(extra));
      try {
        await assert.rejects(b.createEnvironment({ tenant: 'preflight', taskId: reason }), (err: unknown) => {
          assert.ok(err instanceof SshConnectError, `expected SshConnectError, got ${String(err)}`);
          assert.equal(err.reason, reason);
          assert.equal(err.code, code);
          assert.match(err.message, message);
          return true;
        });
      } finally {
        await b.close();
      }
    };

    it('a key the server does not accept', async () => {
      await connectFails({ privateKey: generateKeyPair().privateKey }, 'auth', 'FAILED_PRECONDITION', /authentication as sandbox@127\.0\.0\.1:\d+ failed.*test-key/);
    });

    it('a changed host key', async () => {
      const file = path.join(stateDir, 'known_hosts_changed');
      const other = generateKeyPair().publicKey.split(' ')[1];
      await writeFile(file, `# pinned earlier\n[127.0.0.1]:${sshd.port} ssh-ed25519 ${other}\n`);
      await connectFails({ knownHostsPath: file }, 'host-key-changed', 'FAILED_PRECONDITION', /has CHANGED.*line 2/);
    });

    it('an unknown host key under the strict policy', async () => {
      await connectFails(
        { knownHostsPath: path.join(stateDir, 'known_hosts_empty'), hostKeyPolicy: 'strict' },
        'host-key-unknown',
        'FAILED_PRECONDITION',
        /not in .*known_hosts_empty.*strict/,
      );
    });

    it('a host name that does not resolve', async () => {
      await connectFails({ host: 'berth-no-such-host.invalid' }, 'dns', 'UNAVAILABLE', /cannot resolve ssh host "berth-no-such-host\.invalid"/);
    });

    it('a port nothing listens on', async () => {
      const server = net.createServer();
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const port = (server.address() as net.AddressInfo).port;
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await connectFails({ port }, 'refused', 'UNAVAILABLE', /was refused/);
    });

    it('a server that never answers the handshake', async () => {
      const sockets: net.Socket[] = [];
      const server = net.createServer((s) => sockets.push(s));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        const port = (server.address() as net.AddressInfo).port;
        await connectFails({ port, connectTimeoutMs: 700 }, 'timeout', 'UNAVAILABLE', /timed out.*ssh_connect_timeout/);
      } finally {
        for (const s of sockets) s.destroy();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
    });

    it('maps to typed domain errors that keep their gRPC code', () => {
      assert.ok(new SshConnectError('UNAVAILABLE', 'dns', { host: 'h', port: 22, user: 'u' }, 'm') instanceof BerthError);
    });
  });
});
