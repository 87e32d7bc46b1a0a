/**
 * The exec agent on its stdin/stdout (`berth_agent.pyz --stdio`), started as
 * a local child process (python3 on this host) and through `docker exec -i`
 * into a real berth-sandbox container: the same operations the docker
 * backend drives over its socket, a command cannot touch the channel, and a
 * sandbox without python3 (or with an agent of another version) is told
 * apart with a typed error.
 */
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, copyFile, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Writable } from 'node:stream';
import Dockerode from 'dockerode';
import { createLogger, silentLogger } from '../../services/common/logging.js';
import type { AgentChannel } from '../../services/executor/backends/shared/agent/agent-channel.js';
import {
  FILE_CHUNK_BYTES,
  FrameDecoder,
  encodeFrame,
  foregroundExitCode,
} from '../../services/executor/backends/shared/agent/agent-protocol.js';
import {
  AgentUnavailableError,
  startStdioAgent,
  type AgentSpawn,
} from '../../services/executor/backends/shared/agent/stdio-agent.js';
import { SandboxLostError, type SandboxProcess } from '../../services/executor/backends/shared/sandbox-channel.js';
import { ExecDeadline } from '../../services/executor/backends/shared/exec-deadline.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { AGENT_FILE_NAME, findAgentScript } from '../../services/executor/backends/shared/agent/agent-script.js';
import { buildAgentVariant } from '../support/agent-variant.js';
import { realPython } from '../support/python-bin.js';

const AGENT = findAgentScript();

const docker = new Dockerode();
const dockerUnavailable = await dockerUnavailableReason(docker);

const PYTHON = realPython();

const localSpawn: AgentSpawn = (argv) => spawn(argv[0]!, argv.slice(1), { stdio: 'pipe' });

/** Runs `script` and collects its output and exit. */
async function run(channel: AgentChannel, script: string, extra: { stdin?: string; pty?: boolean } = {}) {
  let out = '';
  const proc = await channel.spawn({ script, cwd: '/tmp', onOutput: (c) => (out += c.toString('utf8')), ...extra });
  const exit = await proc.exited;
  return { out, code: exit.code, signal: exit.signal };
}

/**
 * One exec with a deadline, composed as every backend composes it: the
 * shared ExecDeadline, the channel's process-group kill, 124 / 130.
 */
async function execWithDeadline(channel: AgentChannel, script: string, timeoutMs: number, signal?: AbortSignal) {
  let out = '';
  const proc = await channel.spawn({ script, cwd: '/tmp', onOutput: (c) => (out += c.toString('utf8')) });
  let killing: Promise<void> | undefined;
  const deadline = new ExecDeadline({ timeoutMs, ...(signal ? { signal } : {}) }, () => {
    killing ??= proc.kill(500);
  });
  try {
    const exit = await proc.exited;
    if (killing) await killing;
    return { ...deadline.result(foregroundExitCode(exit.code, exit.signal)), out, pid: proc.pid };
  } finally {
    deadline.dispose();
  }
}

/** The operations every transport must carry, against one started channel. */
function operations(name: string, open: () => Promise<AgentChannel>): void {
  describe(name, () => {
    let channel: AgentChannel;
    before(async () => {
      channel = await open();
    });
    after(() => channel?.close());

    it('says hello over stdio with its version and capabilities, and no token', () => {
      assert.equal(channel.hello.transport, 'stdio');
      assert.equal(channel.hello.token, '');
      assert.equal(channel.hello.version, 2);
      assert.ok(channel.hello.capabilities.includes('pty'));
      assert.match(channel.hello.python, /^3\.\d+\.\d+$/);
    });

    it('runs a command with output, stdin and exit code', async () => {
      const r = await run(channel, 'echo out; echo err >&2; read line; echo "got $line"; exit 7', { stdin: 'hello\n' });
      assert.equal(r.code, 7);
      assert.match(r.out, /out\n/);
      assert.match(r.out, /err\n/);
      assert.match(r.out, /got hello\n/);
    });

    it('kills a whole process group (what a timeout does) and reports the signal', async () => {
      const marker = `/tmp/berth-stdio-${randomBytes(4).toString('hex')}`;
      const proc = await channel.spawn({
        script: `(sleep 300; touch ${marker}) & sleep 300`,
        cwd: '/tmp',
        onOutput: () => undefined,
      });
      await proc.kill(500);
      const exit = await proc.exited;
      assert.equal(exit.signal, 15);
      const left = await run(channel, `ps -o stat= -s ${proc.pid} | grep -vc "^Z"; test -e ${marker} && echo touched || echo clean`);
      assert.match(left.out, /^0\nclean\n$/);
    });

    it('a timeout reports 124 and leaves nothing of the command running', async () => {
      const r = await execWithDeadline(channel, 'echo started; (sleep 300 &); trap "" TERM; sleep 300', 300);
      assert.equal(r.exitCode, 124);
      assert.equal(r.timedOut, true);
      assert.match(r.out, /started/);
      const left = await run(channel, `ps -o stat= -s ${r.pid} | grep -vc "^Z" || true`);
      assert.equal(left.out.trim(), '0');
    });

    it('an interrupt reports 130', async () => {
      const abort = new AbortController();
      const running = execWithDeadline(channel, 'echo go; sleep 300', 60_000, abort.signal);
      await new Promise((r) => setTimeout(r, 200));
      abort.abort();
      const r = await running;
      assert.equal(r.exitCode, 130);
      assert.equal(r.interrupted, true);
    });

    it('keeps a background process open for writes, then kills it', async () => {
      let out = '';
      const proc: SandboxProcess = await channel.spawn({
        script: 'while read l; do echo "bg:$l"; done',
        cwd: '/tmp',
        keepStdin: true,
        onOutput: (c) => (out += c.toString('utf8')),
      });
      await proc.write('one\n');
      await proc.write('two\n');
      await waitFor(() => out.includes('bg:two'));
      await proc.kill(500);
      const exit = await proc.exited;
      assert.equal(exit.signal, 15);
      assert.equal(out, 'bg:one\nbg:two\n');
      await assert.rejects(proc.write('three\n'), /exited/);
    });

    it('runs a command under a PTY', async () => {
      const r = await run(channel, 'test -t 0 && test -t 1 && echo tty; stty size', { pty: true });
      assert.equal(r.code, 0);
      assert.match(r.out, /tty\r?\n50 200/);
    });

    it('writes and reads a file in chunks, byte for byte', async () => {
      const data = randomBytes(FILE_CHUNK_BYTES * 2 + 1234);
      const file = `/tmp/berth-stdio-${randomBytes(4).toString('hex')}/sub/f.bin`;
      await channel.writeFile(file, data);
      const back = await channel.readFile(file);
      assert.ok(back.equals(data));
      const st = await channel.stat(file);
      assert.equal(st.sizeBytes, data.length);
      await assert.rejects(channel.readFile('/tmp/berth-stdio-missing/none'), /File not found/);
      await run(channel, `rm -rf ${path.dirname(path.dirname(file))}`);
    });

    it('gives a command nothing of the channel: not on fd 0-2, not through /proc', async () => {
      const r = await run(
        channel,
        [
          // fd 0 is the command's own (closed) stdin, 1 and 2 its own output pipe; nothing else is open.
          'ls /proc/self/fd | sort -n | tr "\\n" " "; echo',
          'head -c 100 <&0 | wc -c',
          // The agent's descriptors: its parent's fd directory is closed to the command.
          'ls /proc/$PPID/fd > /dev/null 2>&1 && echo agent-fds-visible || echo agent-fds-hidden',
          // (Not as root: root may read any process's descriptors, and would steal bytes of the channel.)
          'if [ "$(id -u)" != 0 ]; then for f in /proc/$PPID/fd/*; do head -c 1 "$f" > /dev/null 2>&1 && echo "read $f"; done; fi; echo done',
          'readlink /proc/$PPID/fd/0 2>/dev/null || echo no-link',
          'id -u',
        ].join('\n'),
      );
      assert.equal(r.code, 0, r.out);
      const lines = r.out.split('\n');
      assert.equal(lines[0], '0 1 2 3 ', r.out);
      assert.equal(lines[1], '0');
      if (lines[5] === '0') {
        // root may look into any process (CAP_SYS_PTRACE); what it finds on fd 0 is /dev/null, not the channel.
        assert.equal(lines[4], '/dev/null');
      } else {
        assert.equal(lines[2], 'agent-fds-hidden');
        assert.equal(lines[3], 'done');
        assert.equal(lines[4], 'no-link');
      }
      // Garbage the command writes to its own output is output, not frames: the channel still answers.
      const spam = await run(channel, 'printf "\\x00\\x00\\x00\\x05garbage" ; printf "\\xff\\xff\\xff\\xff" >&2');
      assert.equal(spam.code, 0);
      await channel.ping();
    });

    it('a command the channel drops is killed with the agent', async () => {
      // Separate channel: this one is closed on purpose.
      const own = await open();
      const marker = `berth-stdio-orphan-${randomBytes(4).toString('hex')}`;
      await own.spawn({ script: `exec -a ${marker} sleep 300`, cwd: '/tmp', onOutput: () => undefined });
      own.close();
      await waitFor(async () => (await run(channel, `pgrep -f ${marker} | wc -l`)).out.trim() === '0');
      await assert.rejects(own.ping(), SandboxLostError);
    });
  });
}

/** The header of the next frame on `stream`. */
function readFrame(stream: NodeJS.ReadableStream): Promise<Record<string, unknown>> {
  const decoder = new FrameDecoder();
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      const [frame] = decoder.push(chunk);
      if (!frame) return;
      stream.off('data', onData);
      resolve(frame.header as Record<string, unknown>);
    };
    stream.on('data', onData);
    stream.once('end', () => reject(new Error('ended before a frame')));
  });
}

/** Connects to `socketPath`, sends `payload` and collects what comes back until the peer closes. */
function talk(socketPath: string, payload: Buffer): Promise<Buffer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const socket = net.connect(socketPath, () => socket.write(payload));
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', () => undefined);
    socket.on('close', () => resolve(Buffer.concat(chunks)));
  });
}

async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('exec agent over stdio, local child process', { timeout: 120_000 }, () => {
  operations('python3 on this host', () =>
    startStdioAgent({ spawn: localSpawn, python: PYTHON, agentPath: AGENT, description: 'this host', logger: silentLogger() }),
  );

  it('a dropped stream with --linger: the agent waits on its socket, the next start bridges to it, background work carries on', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-linger-'));
    const lingerPath = path.join(dir, 'agent', 'linger.sock');
    const starts: string[][] = [];
    const channel = await startStdioAgent({
      spawn: (argv) => {
        starts.push([...argv.slice(2)]);
        return localSpawn(argv);
      },
      python: PYTHON,
      agentPath: AGENT,
      description: 'this host',
      lingerPath,
    });
    try {
      let out = '';
      const marker = `berth-linger-${randomBytes(4).toString('hex')}`;
      const bg = await channel.spawn({
        script: `echo up; read line; echo "got $line"; exec -a ${marker} sleep 300`,
        cwd: '/tmp',
        keepStdin: true,
        background: true,
        onOutput: (c) => (out += c.toString('utf8')),
      });
      await waitFor(() => out.includes('up'));
      channel.dropStream();
      assert.equal(await channel.recover(), true);
      assert.deepEqual(starts, [
        ['--stdio', '--linger', lingerPath],
        ['--stdio', '--linger', lingerPath, '--resume', String(channel.hello.pid)],
      ]);
      await bg.write('again\n');
      await waitFor(() => out.includes('got again'));
      // The commands still run under the first agent: it was found again, not replaced.
      assert.equal((await run(channel, `ps -o ppid= -p $(pgrep -f '^[b]erth-linger-${marker.slice(13)}')`)).out.trim(), String(channel.hello.pid));
      await bg.kill(1000);
      assert.equal((await bg.exited).signal, 15);
    } finally {
      channel.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a lingering agent answers only the resume key it gave, and ends everything on bye', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-linger-'));
    const lingerPath = path.join(dir, 'agent', 'linger.sock');
    const child = spawn(PYTHON, [AGENT, '--stdio', '--linger', lingerPath], { stdio: ['pipe', 'pipe', 'ignore'] });
    try {
      const first = await readFrame(child.stdout!);
      assert.equal(first.op, 'hello');
      assert.match(String(first.resume_key), /^[0-9a-f]{32}$/);
      child.stdin!.end();
      await waitFor(() => existsSync(lingerPath));
      assert.equal((await stat(lingerPath)).mode & 0o777, 0o600);
      assert.equal((await stat(path.dirname(lingerPath))).mode & 0o777, 0o700);
      // Wrong key: closed without a word.
      const wrong = await talk(lingerPath, encodeFrame({ op: 'auth', id: 0, key: 'f'.repeat(32) }));
      assert.equal(wrong.length, 0);
      // Something that is not an auth frame: the same.
      assert.equal((await talk(lingerPath, encodeFrame({ op: 'ping', id: 1 }))).length, 0);
      // The right key: a resumed hello from the same agent.
      const socket = net.connect(lingerPath);
      socket.write(encodeFrame({ op: 'auth', id: 0, key: String(first.resume_key) }));
      const again = await readFrame(socket);
      assert.deepEqual([again.op, again.resumed, again.pid], ['hello', true, first.pid]);
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      socket.end(encodeFrame({ op: 'bye', id: 0 }));
      assert.equal(await exited, 0);
      assert.equal(existsSync(lingerPath), false, 'the linger socket is gone with the agent');
    } finally {
      child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('--resume finds an agent whose stream broke without an end (a PTY, an SDK exec): it is told, lingers, and resumes', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-linger-'));
    const lingerPath = path.join(dir, 'agent', 'linger.sock');
    // Its stdin stays open and unread: the agent cannot see that nobody is there any more.
    const agent = spawn(PYTHON, [AGENT, '--stdio', '--linger', lingerPath], { stdio: ['pipe', 'pipe', 'ignore'] });
    let bridge: ReturnType<typeof spawn> | undefined;
    try {
      // A resume names the pid its hello gave (the agent listens for the signal from then on).
      const first = await readFrame(agent.stdout!);
      assert.equal(existsSync(lingerPath), false, 'no linger socket while the stream is up');
      bridge = spawn(PYTHON, [AGENT, '--stdio', '--linger', lingerPath, '--resume', String(first.pid)], { stdio: ['pipe', 'pipe', 'ignore'] });
      bridge.stdin!.write(encodeFrame({ op: 'auth', id: 0, key: String(first.resume_key) }));
      const again = await readFrame(bridge.stdout!);
      assert.deepEqual([again.op, again.resumed, again.pid, again.resume_key], ['hello', true, first.pid, first.resume_key]);
      const exited = new Promise<number | null>((resolve) => agent.once('exit', (code) => resolve(code)));
      bridge.stdin!.end(encodeFrame({ op: 'bye', id: 1 }));
      assert.equal(await exited, 0);
    } finally {
      agent.kill('SIGKILL');
      bridge?.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('--resume signals no process whose command line does not name the linger path: it starts afresh', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-linger-'));
    const lingerPath = path.join(dir, 'linger.sock');
    // SIGUSR1 would end it (the default action): a process that took a dead agent's pid.
    const other = spawn('sleep', ['60'], { stdio: 'ignore' });
    const child = spawn(PYTHON, [AGENT, '--stdio', '--linger', lingerPath, '--resume', String(other.pid)], { stdio: ['pipe', 'pipe', 'ignore'] });
    try {
      const hello = await readFrame(child.stdout!);
      assert.deepEqual([hello.op, hello.resumed], ['hello', false], 'a fresh agent');
      assert.equal(other.exitCode, null);
      assert.equal(other.signalCode, null);
      assert.equal(other.kill(0), true, 'the other process still runs');
    } finally {
      child.kill('SIGKILL');
      other.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('--resume never bridges to a socket held by another process than the agent: it starts afresh, and says nothing there', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-linger-'));
    const lingerPath = path.join(dir, 'linger.sock');
    let heard = 0;
    let closedOnce!: () => void;
    const closed = new Promise<void>((resolve) => (closedOnce = resolve));
    // This test process is no agent: a socket a command of the sandbox bound in the agent's place.
    const impostor = net.createServer((socket) => {
      socket.on('data', (c: Buffer) => (heard += c.length));
      socket.on('error', () => undefined);
      socket.on('close', () => closedOnce());
    });
    await new Promise<void>((resolve) => impostor.listen(lingerPath, resolve));
    const child = spawn(PYTHON, [AGENT, '--stdio', '--linger', lingerPath, '--resume', '1'], { stdio: ['pipe', 'pipe', 'ignore'] });
    try {
      child.stdin!.write(encodeFrame({ op: 'auth', id: 0, key: 'a'.repeat(32) }));
      const hello = await readFrame(child.stdout!);
      assert.deepEqual([hello.op, hello.resumed], ['hello', false], 'a fresh agent');
      // It looked, and hung up having sent nothing.
      await closed;
      assert.equal(heard, 0);
    } finally {
      child.kill('SIGKILL');
      await new Promise<void>((resolve) => impostor.close(() => resolve()));
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('reports a host without python3 as a typed error to fall back on', async () => {
    const empty = await mkdtemp(path.join(os.tmpdir(), 'berth-nopython-'));
    try {
      const noPython: AgentSpawn = (argv) => spawn(argv[0]!, argv.slice(1), { stdio: 'pipe', env: { PATH: empty } });
      const err = await startStdioAgent({ spawn: noPython, agentPath: AGENT, description: 'bare host' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof AgentUnavailableError, String(err));
      assert.equal(err.reason, 'no-python');
      assert.equal(err.canFallBack, true);
      assert.match(err.message, /bare host has no python3/);
      // Said once in the log per host, however many tasks find it so.
      const lines: string[] = [];
      const logger = createLogger('info', new Writable({ write: (c: Buffer, _e, cb) => (lines.push(c.toString()), cb()) }));
      const key = `bare-${randomBytes(4).toString('hex')}`;
      for (let i = 0; i < 3; i++) {
        await assert.rejects(
          startStdioAgent({ spawn: noPython, agentPath: AGENT, description: 'bare host', logger, fallbackLogKey: key }),
          AgentUnavailableError,
        );
      }
      assert.equal(lines.filter((l) => l.includes('the exec agent cannot run here')).length, 1, lines.join(''));
    } finally {
      await rm(empty, { recursive: true, force: true });
    }
  });

  it('reports a Python older than 3.8 as a typed error to fall back on', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-oldpython-'));
    try {
      // Test double of an old interpreter: the real agent, run by this python3 claiming to be 3.7.
      const oldPython = path.join(dir, 'python3');
      const claim = 'import runpy, sys; sys.version_info = (3, 7, 9, "final", 0); p = sys.argv[1]; sys.argv = sys.argv[1:]; runpy.run_path(p, run_name="__main__")';
      await writeFile(oldPython, `#!/bin/sh\nexec ${PYTHON} -c '${claim}' "$@"\n`);
      await chmod(oldPython, 0o755);
      const err = await startStdioAgent({ spawn: localSpawn, python: oldPython, agentPath: AGENT, description: 'old host' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof AgentUnavailableError, String(err));
      assert.equal(err.reason, 'python-too-old');
      assert.equal(err.canFallBack, true);
      assert.match(err.message, /3\.8 or newer required, this is 3\.7/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('is written in syntax Python 3.6 parses, so an old Python can say why it will not run it', () => {
    const parse = 'import ast, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [ast.parse(z.read(n), feature_version=(3, 6)) for n in z.namelist()]';
    execFileSync(PYTHON, ['-c', parse, AGENT]);
  });

  it('gives up on a process that never says hello, and ends it', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-silent-'));
    try {
      const silent = path.join(dir, 'python3');
      const pidFile = path.join(dir, 'pid');
      await writeFile(silent, `#!/bin/sh\necho $$ > ${pidFile}\nexec sleep 300\n`);
      await chmod(silent, 0o755);
      const err = await startStdioAgent({
        spawn: localSpawn,
        python: silent,
        agentPath: AGENT,
        description: 'silent host',
        helloTimeoutMs: 300,
      }).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof AgentUnavailableError, String(err));
      assert.equal(err.reason, 'no-hello');
      assert.equal(err.canFallBack, false);
      const pid = Number(await readFile(pidFile, 'utf8'));
      await waitFor(() => {
        try {
          process.kill(pid, 0);
          return false;
        } catch {
          return true;
        }
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses an agent of another protocol version, naming both', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-oldagent-'));
    try {
      const old = await buildAgentVariant(dir, 'berth_agent/protocol.py', (s) => s.replace(/^VERSION = 2$/m, 'VERSION = 1'));
      const err = await startStdioAgent({ spawn: localSpawn, python: PYTHON, agentPath: old, description: 'old host' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof AgentUnavailableError, String(err));
      assert.equal(err.reason, 'version-mismatch');
      assert.equal(err.canFallBack, false);
      assert.match(err.message, /speaks protocol version 1, this executor speaks version 2/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('an atomic write: the file changes only with its last chunk; abort, an error or a dropped stream removes the temp file', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-atomic-'));
    const agent = spawn(PYTHON, [AGENT, '--stdio'], { stdio: ['pipe', 'pipe', 'ignore'] });
    const decoder = new FrameDecoder();
    const waiting = new Map<number, (frame: { header: Record<string, unknown>; body: Buffer }) => void>();
    let hello: (() => void) | undefined;
    const helloSeen = new Promise<void>((resolve) => (hello = resolve));
    agent.stdout.on('data', (chunk: Buffer) => {
      for (const frame of decoder.push(chunk)) {
        if (frame.header.op === 'hello') hello?.();
        else waiting.get(Number(frame.header.id))?.(frame);
      }
    });
    let nextId = 1;
    const request = (header: { op: string } & Record<string, unknown>, body: Buffer = Buffer.alloc(0)) =>
      new Promise<Record<string, unknown>>((resolve) => {
        const id = nextId++;
        waiting.set(id, (frame) => resolve(frame.header));
        agent.stdin.write(encodeFrame({ ...header, id }, body));
      });
    const temps = async () => (await readdir(dir)).filter((n) => n.includes('.berth-'));
    const file = path.join(dir, 'f.txt');
    try {
      await helloSeen;
      await writeFile(file, 'old\n');
      await chmod(file, 0o640);
      const first = await request({ op: 'write', path: file, offset: 0, last: false }, Buffer.from('new '));
      assert.equal(first.op, 'ok', JSON.stringify(first));
      const write = first.write;
      assert.equal(typeof write, 'number');
      assert.match((await temps()).join(','), /^\.f\.txt\.berth-[A-Za-z0-9]{6}$/);
      assert.equal(await readFile(file, 'utf8'), 'old\n', 'the file is untouched until the last chunk');
      const second = await request({ op: 'write', path: file, offset: 4, last: true, write }, Buffer.from('content\n'));
      assert.equal(second.op, 'ok', JSON.stringify(second));
      assert.equal(await readFile(file, 'utf8'), 'new content\n');
      assert.equal((await stat(file)).mode & 0o7777, 0o640);
      assert.deepEqual(await temps(), []);

      // Aborted: the temp file goes, the file stays.
      const started = await request({ op: 'write', path: file, offset: 0, last: false }, Buffer.from('x'));
      assert.equal((await temps()).length, 1);
      assert.equal((await request({ op: 'abort', write: started.write })).op, 'ok');
      assert.deepEqual(await temps(), []);
      // A chunk out of order fails the write and removes its temp file.
      const again = await request({ op: 'write', path: file, offset: 0, last: false }, Buffer.from('x'));
      const skipped = await request({ op: 'write', path: file, offset: 5, last: true, write: again.write }, Buffer.from('y'));
      assert.equal(skipped.op, 'error');
      assert.equal(skipped.errno, 'EINVAL');
      assert.deepEqual(await temps(), []);
      // A stream that ends halfway: the agent removes the temp file as it exits.
      await request({ op: 'write', path: file, offset: 0, last: false }, Buffer.from('x'));
      assert.equal((await temps()).length, 1);
      const exited = new Promise((resolve) => agent.once('exit', resolve));
      agent.stdin.end();
      await exited;
      assert.deepEqual(await temps(), []);
      assert.equal(await readFile(file, 'utf8'), 'new content\n');
    } finally {
      agent.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses to write through an agent without atomic writes', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-oldagent-'));
    try {
      const old = await buildAgentVariant(dir, 'berth_agent/protocol.py', (s) => s.replace(', "atomic-write"]', ']'));
      const channel = await startStdioAgent({ spawn: localSpawn, python: PYTHON, agentPath: old, description: 'old host' });
      try {
        await assert.rejects(channel.writeFile(path.join(dir, 'f.txt'), Buffer.from('x')), /cannot write files atomically/);
      } finally {
        channel.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('tells a process that prints before the hello from an agent', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-chatty-'));
    try {
      const chatty = path.join(dir, 'python3');
      await writeFile(chatty, `#!/bin/sh\necho "Welcome to the cluster"\nexec ${PYTHON} "$@"\n`);
      await chmod(chatty, 0o755);
      const err = await startStdioAgent({
        spawn: localSpawn,
        python: chatty,
        agentPath: AGENT,
        description: 'chatty host',
      }).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof AgentUnavailableError, String(err));
      assert.equal(err.reason, 'not-an-agent');
      assert.match(err.message, /Welcome to the cluster/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('exec agent over stdio, docker exec -i', { skip: dockerUnavailable, timeout: 180_000 }, () => {
  const name = `berth-stdio-test-${randomBytes(4).toString('hex')}`;
  let agentDir: string;

  before(async () => {
    agentDir = await mkdtemp(path.join(os.tmpdir(), 'berth-stdio-agent-'));
    await copyFile(AGENT, path.join(agentDir, AGENT_FILE_NAME));
    await chmod(agentDir, 0o755);
    execFileSync('docker', [
      'run', '-d', '--rm', '--name', name, '--network', 'none',
      '-v', `${agentDir}:/opt/berth-agent:ro`, SANDBOX_IMAGE, 'sleep', 'infinity',
    ]);
  });

  after(async () => {
    try {
      execFileSync('docker', ['rm', '-f', name], { stdio: 'ignore' });
    } catch {
      // Already gone.
    }
    await rm(agentDir, { recursive: true, force: true });
  });

  const dockerExec =
    (extra: string[] = []): AgentSpawn =>
    (argv) =>
      spawn('docker', ['exec', '-i', ...extra, name, ...argv], { stdio: 'pipe' });

  operations('into a berth-sandbox container', () =>
    startStdioAgent({
      spawn: dockerExec(),
      agentPath: `/opt/berth-agent/${AGENT_FILE_NAME}`,
      description: `container ${name}`,
      logger: silentLogger(),
    }),
  );

  it('reports a container without python3 as a typed error to fall back on', async () => {
    const err = await startStdioAgent({
      spawn: dockerExec(['-e', 'PATH=/nonexistent']),
      agentPath: `/opt/berth-agent/${AGENT_FILE_NAME}`,
      description: `container ${name}`,
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof AgentUnavailableError, String(err));
    assert.equal(err.reason, 'no-python');
    assert.equal(err.canFallBack, true);
  });
});
