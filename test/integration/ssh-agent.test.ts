/**
 * The ssh backend's exec agent against a real OpenSSH server: the agent is
 * copied once under a content-addressed name and reused, a lost agent
 * stream is replaced on the next call with a clear error for the command
 * it cut off, and a host without python3 falls back to a channel per
 * command, said once in the log.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, afterEach, before, describe, it } from 'node:test';
import { runDoctor } from '../../services/cli/doctor.js';
import { parseConfig } from '../../services/common/config-load.js';
import { BerthError, UnavailableError } from '../../services/common/errors.js';
import { createLogger, silentLogger } from '../../services/common/logging.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { findAgentScript } from '../../services/executor/backends/shared/agent/agent-script.js';
import { buildAgentVariant } from '../support/agent-variant.js';
import { SshBackend, type SshBackendOptions } from '../../services/executor/backends/ssh/ssh-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { countProcessesScript } from '../../services/conformance/process-probe.js';
import { startSshd, type StartedSshd } from '../../services/cli/bench/sshd-container.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A logger whose records are kept, for "said once" checks. */
function capturingLogger(): { logger: ReturnType<typeof createLogger>; records: { level: number; msg: string }[] } {
  const records: { level: number; msg: string }[] = [];
  const logger = createLogger(
    'info',
    new Writable({
      write(chunk: Buffer, _encoding, callback) {
        for (const line of chunk.toString().split('\n')) {
          if (line.trim()) records.push(JSON.parse(line) as { level: number; msg: string });
        }
        callback();
      },
    }),
  );
  return { logger, records };
}

async function agentHash(): Promise<string> {
  return createHash('sha256').update(await readFile(findAgentScript())).digest('hex').slice(0, 16);
}

interface Fixture {
  sshd: StartedSshd;
  stateDir: string;
  options: (extra?: Partial<SshBackendOptions>) => SshBackendOptions;
}

/** `berth doctor` against the fixture's host; the findings as `verdict text` lines. */
async function doctor(f: Fixture): Promise<string[]> {
  const keyPath = path.join(f.stateDir, 'id_ed25519');
  await writeFile(keyPath, f.sshd.keys.privateKey, { mode: 0o600 });
  const config = parseConfig({
    terminal: { backend: 'ssh', ssh_host: f.sshd.host, ssh_port: f.sshd.port, ssh_user: f.sshd.user, ssh_key: keyPath },
    executor: { state_root: f.stateDir },
  });
  const findings = await runDoctor(config, () => undefined);
  return findings.map((x) => `${x.verdict} ${x.text}`);
}

async function fixture(prefix: string): Promise<Fixture> {
  const sshd = await startSshd();
  const stateDir = await mkdtemp(path.join(os.tmpdir(), prefix));
  return {
    sshd,
    stateDir,
    options: (extra = {}) => ({
      host: sshd.host,
      port: sshd.port,
      user: sshd.user,
      privateKey: sshd.keys.privateKey,
      keyName: 'test-key',
      knownHostsPath: path.join(stateDir, 'known_hosts'),
      pollIntervalMs: 100,
      ...extra,
    }),
  };
}

describe('ssh backend exec agent', { timeout: 300_000 }, () => {
  let f: Fixture;
  let backend: SshBackend;
  let envs: TaskEnvironments;
  const used: TaskKey[] = [];
  let taskNo = 0;
  const task = (): TaskKey => {
    const key = { tenant: 'agent', taskId: `task-${++taskNo}` };
    used.push(key);
    return key;
  };
  const onServer = async (script: string) => (await f.sshd.exec(['bash', '-c', script])).output;

  before(async () => {
    f = await fixture('berth-ssh-agent-');
    backend = new SshBackend(f.options());
    envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
  });
  afterEach(async () => {
    await Promise.all(used.splice(0).map((key) => envs.release(key)));
  });
  after(async () => {
    await envs?.closeAll();
    await backend?.close();
    await f?.sshd.stop();
    if (f) await rm(f.stateDir, { recursive: true, force: true });
  });

  it('copies the agent once under its content hash and reuses it across tasks and executors', async () => {
    const hash = await agentHash();
    const first = task();
    const r = await envs.exec(first, { command: 'echo $((6 * 7))', timeoutMs: 20_000 });
    assert.equal(r.output, '42\n');
    assert.equal(backend.environmentOf(first)?.usesAgent, true);
    const listing = async () => (await onServer('cd ~/.berth && ls -a | grep agent; stat -c %i agent-*.pyz')).trim().split('\n');
    const [name, inode] = await listing();
    assert.equal(name, `agent-${hash}.pyz`);
    assert.match(await onServer(`pgrep -fc 'agent-${hash}.pyz --stdio'`), /^[1-9]/);

    // Another task, and another executor: the same file, not copied again (same inode, no temp files left).
    await envs.exec(task(), { command: 'true', timeoutMs: 20_000 });
    const other = new SshBackend(f.options());
    const otherEnvs = new TaskEnvironments({ backend: other, logger: silentLogger(), lifetimeSeconds: 0 });
    try {
      await otherEnvs.exec({ tenant: 'agent', taskId: 'other-executor' }, { command: 'true', timeoutMs: 20_000 });
    } finally {
      await otherEnvs.closeAll();
      await other.close();
    }
    assert.deepEqual(await listing(), [name, inode]);
  });

  it('copies a changed agent beside the old one, under its own hash', async () => {
    const modified = await buildAgentVariant(f.stateDir, 'berth_agent/__init__.py', (s) => `${s}\n# a later version\n`);
    const content = await readFile(modified);
    const hash = createHash('sha256').update(content).digest('hex').slice(0, 16);
    const other = new SshBackend(f.options({ agentScriptPath: modified }));
    const otherEnvs = new TaskEnvironments({ backend: other, logger: silentLogger(), lifetimeSeconds: 0 });
    try {
      const r = await otherEnvs.exec({ tenant: 'agent', taskId: 'upgraded' }, { command: 'echo up', timeoutMs: 20_000 });
      assert.equal(r.output, 'up\n');
    } finally {
      await otherEnvs.closeAll();
      await other.close();
    }
    const names = (await onServer('cd ~/.berth && ls agent-*.pyz')).trim().split('\n');
    assert.ok(names.includes(`agent-${hash}.pyz`), names.join(','));
    assert.ok(names.includes(`agent-${await agentHash()}.pyz`), names.join(','));
  });

  it('a lost agent stream stops the command it cut off, says so, and the next call starts a new agent', async () => {
    const key = task();
    const seconds = String(600_000 + Math.floor(Math.random() * 99_999));
    await envs.exec(key, { command: 'cd /tmp && export KEEP=yes', timeoutMs: 20_000 });
    const before = backend.environmentOf(key)?.agentChannel;
    assert.ok(before);
    const outcome = envs.exec(key, { command: `echo go; sleep ${seconds}`, timeoutMs: 60_000 }).then(
      (result) => result,
      (err: unknown) => err,
    );
    const count = async () => Number(/count=(\d+)/.exec(await onServer(countProcessesScript(seconds)))?.[1] ?? NaN);
    for (let i = 0; (await count()) !== 1; i++) {
      if (i > 150) assert.fail('the command did not start');
      await sleep(100);
    }
    // The agent dies (as when its channel is cut): the stream ends under the running command.
    await onServer(`kill -KILL ${before.hello.pid}`);
    const err = await outcome;
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, /was lost while the command ran; it was stopped/);
    for (let i = 0; (await count()) !== 0; i++) {
      if (i > 150) assert.fail('the cut-off command was not killed');
      await sleep(100);
    }
    const r = await envs.exec(key, { command: 'pwd; echo "$KEEP"', timeoutMs: 20_000 });
    assert.equal(r.output, '/tmp\nyes\n');
    const after = backend.environmentOf(key)?.agentChannel;
    assert.ok(after && after !== before && !after.isLost, 'a new agent runs');
    // Files go through the new agent too.
    await envs.writeFile(key, '/tmp/after-agent.txt', 'ok');
    assert.equal((await envs.readFile(key, '/tmp/after-agent.txt')).content.toString(), 'ok');
  });

  it('runs a foreground command under a terminal through the agent', async () => {
    const key = task();
    const r = await envs.exec(key, { command: 'tty; test -t 1 && echo out-is-a-tty', timeoutMs: 20_000, pty: true });
    assert.equal(r.exitCode, 0, r.output);
    assert.match(r.output, /^\/dev\/pts\/\d+\r?$/m);
    assert.match(r.output, /out-is-a-tty/);
    assert.equal(backend.environmentOf(key)?.usesAgent, true);
  });

  it("every task of a tenant gets an agent: past sshd's MaxSessions a second connection opens", async () => {
    const keys = Array.from({ length: 8 }, () => task());
    await Promise.all(keys.map((key) => envs.exec(key, { command: 'true', timeoutMs: 60_000 })));
    assert.deepEqual(
      keys.map((key) => backend.environmentOf(key)?.usesAgent),
      keys.map(() => true),
    );
    // MaxSessions 10 leaves 6 agents a connection (4 channels kept for helpers, kills and SFTP).
    assert.equal(backend.connectionCount('agent'), 2);
    const results = await Promise.all(keys.map((key, i) => envs.exec(key, { command: `echo ${i}`, timeoutMs: 60_000 })));
    assert.deepEqual(results.map((r) => r.output), keys.map((_, i) => `${i}\n`));
  });

  it('berth doctor says commands go through the exec agent', async () => {
    const lines = await doctor(f);
    assert.ok(lines.includes('ok commands reach the ssh host through the exec agent (one channel per task)'), lines.join('\n'));
    assert.ok(!lines.some((l) => l.startsWith('fail')), lines.join('\n'));
  });
});

describe('ssh backend on a host without python3', { timeout: 300_000 }, () => {
  let f: Fixture;

  before(async () => {
    f = await fixture('berth-ssh-nopython-');
    const hidden = await f.sshd.exec(['sh', '-c', 'mv "$(command -v python3)" /usr/local/python3.hidden && ! command -v python3'], 'root');
    assert.equal(hidden.exitCode, 0, hidden.output);
  });
  after(async () => {
    await f?.sshd.stop();
    if (f) await rm(f.stateDir, { recursive: true, force: true });
  });

  it('falls back to a channel per command, said once in the log', async () => {
    const { logger, records } = capturingLogger();
    const backend = new SshBackend(f.options({ logger }));
    const envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
    try {
      const keys = [1, 2, 3].map((n) => ({ tenant: 'nopython', taskId: `t${n}` }));
      for (const key of keys) {
        const r = await envs.exec(key, { command: 'cd /tmp; echo $((6 * 7))', timeoutMs: 20_000 });
        assert.equal(r.output, '42\n');
        assert.equal(backend.environmentOf(key)?.usesAgent, false);
      }
      // The shell state and files work as before (SFTP).
      assert.equal((await envs.exec(keys[0]!, { command: 'pwd', timeoutMs: 20_000 })).output, '/tmp\n');
      await envs.writeFile(keys[0]!, '/tmp/no-agent.txt', 'sftp');
      assert.equal((await envs.readFile(keys[0]!, '/tmp/no-agent.txt')).content.toString(), 'sftp');
      assert.match(backend.agentUnusable ?? '', /has no usable python3/);
      const said = records.filter((r) => r.level === 40 && /exec agent cannot run here/.test(r.msg));
      assert.equal(said.length, 1, JSON.stringify(records));
    } finally {
      await envs.closeAll();
      await backend.close();
    }
  });

  it('writes over SFTP atomically: mode kept, new inode, through a symlink; a failed write leaves the file and no temp file', async () => {
    const backend = new SshBackend(f.options({}));
    const envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
    const key = { tenant: 'nopython', taskId: 'atomic' };
    const sh = async (command: string) => (await envs.exec(key, { command, timeoutMs: 20_000 })).output;
    try {
      const dir = (await sh('mktemp -d')).trim();
      assert.equal(backend.environmentOf(key)?.usesAgent, false);
      await envs.writeFile(key, `${dir}/f.txt`, 'old\n');
      const inode = (await sh(`cd ${dir} && chmod 754 f.txt && ln -s f.txt link && stat -c %i f.txt`)).trim();
      await envs.writeFile(key, `${dir}/link`, 'new\n');
      const after = (await sh(`cd ${dir} && [ -L link ] && stat -c '%a %i' f.txt && cat f.txt`)).split('\n');
      assert.equal(after[0]?.split(' ')[0], '754');
      assert.notEqual(after[0]?.split(' ')[1], inode);
      assert.equal(after[1], 'new');
      // The temp file cannot be made beside the file (a directory the user may not write).
      assert.equal(await sh(`cd ${dir} && mkdir locked && echo kept > locked/g.txt && chmod 555 locked && [ "$(id -u)" != 0 ] && echo locked`), 'locked\n');
      await assert.rejects(envs.writeFile(key, `${dir}/locked/g.txt`, 'new\n'), (err: unknown) => err instanceof BerthError && err.code === 'PERMISSION_DENIED');
      assert.equal(await sh(`cat ${dir}/locked/g.txt; ls -A ${dir}/locked ${dir} | grep -c berth-`), 'kept\n0\n');
      await sh(`chmod 755 ${dir}/locked && rm -rf ${dir}`);
    } finally {
      await envs.closeAll();
      await backend.close();
    }
  });

  it('berth doctor warns that the host cannot run the exec agent, and why', async () => {
    const lines = await doctor(f);
    const warning = lines.find((l) => l.startsWith('warn the ssh host cannot run the exec agent'));
    assert.ok(warning, lines.join('\n'));
    assert.match(warning, /has no usable python3.*one ssh channel each.*install python3 \(3\.8 or newer\)/);
    assert.ok(!lines.some((l) => l.startsWith('fail')), lines.join('\n'));
  });
});
