/**
 * A trivial command on a warm ssh task, through the whole stack, beside two
 * baselines against the same sshd (the real OpenSSH server of the test
 * fixture, in a container) in the same run: `true` over an already open
 * ssh2 connection, and `ssh HOST true` (the OpenSSH CLI) over a
 * ControlMaster. Both cases share one sshd and one warm task. Targets
 * (issue 12): p50 ≤ 1.5× the bare ssh2 exec and ≤ 0.5× the ControlMaster CLI.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { Client } from 'ssh2';
import type { BenchCase, BenchContext, Target } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { runTerminal, unmeasured } from '../case-helpers.js';

const TASK = 'bench-ssh-warm';

function sshExec(conn: Client, command: string): Promise<void> {
  return new Promise((resolve, reject) => {
    conn.exec(command, (err, stream) => {
      if (err) return reject(err);
      stream.on('close', (code: number | null) =>
        code === 0 ? resolve() : reject(new Error(`${command} exited ${code} over ssh2`)),
      );
      stream.resume();
      stream.stderr.resume();
    });
  });
}

const run = promisify(execFile);

interface WarmSshTask {
  sshd: { stop(): Promise<void> };
  server: BenchServer;
  scratch: string;
  keyPath: string;
  host: string;
  port: number;
  user: string;
  privateKey: string;
}

/** The sshd fixture, a key file for it, and a server whose ssh task is already warm. */
async function startWarmSshTask(ctx: BenchContext, scratchPrefix: string): Promise<WarmSshTask> {
  // Loaded only here: the fixture pulls in testcontainers.
  const fixture = await import('../sshd-container.js');
  const started = await fixture.startSshd();
  const scratch = mkdtempSync(join(tmpdir(), scratchPrefix));
  const keyPath = join(scratch, 'id_ed25519');
  writeFileSync(keyPath, started.keys.privateKey);
  chmodSync(keyPath, 0o600);
  const server = await ctx.server({
    backend: 'ssh',
    config: {
      terminal: { ssh_host: started.host, ssh_port: started.port, ssh_user: started.user, ssh_key: keyPath },
    },
  });
  await unmeasured(ctx, 'warming the ssh task', () => runTerminal(server, TASK, 'true'));
  return {
    sshd: started,
    server,
    scratch,
    keyPath,
    host: started.host,
    port: started.port,
    user: started.user,
    privateKey: started.keys.privateKey,
  };
}

async function stopWarmSshTask(task: WarmSshTask | undefined): Promise<void> {
  if (!task) return;
  await task.server.endTask(TASK).catch(() => undefined);
  await task.sshd.stop();
  rmSync(task.scratch, { recursive: true, force: true });
}

/**
 * One warm task for the `cases` cases of a run (the runner sets up and tears
 * down one case after the other): started by the first setup, stopped by
 * the last teardown, so both baselines are measured against the same sshd,
 * server and task.
 */
function sharedWarmTask(cases: number): { acquire(ctx: BenchContext): Promise<WarmSshTask>; release(): Promise<void> } {
  let task: Promise<WarmSshTask> | undefined;
  let released = 0;
  return {
    acquire(ctx) {
      task ??= startWarmSshTask(ctx, 'berth-bench-ssh-');
      return task;
    },
    async release() {
      released += 1;
      if (released < cases || !task) return;
      const t = task;
      task = undefined;
      await stopWarmSshTask(await t.catch(() => undefined));
    },
  };
}

/** A target on the ratio of p50s: Berth's `terminal true` over the baseline's. */
function ratioTarget(baseline: string, maxRatio: number): Target {
  return {
    target: `ssh \`terminal true\` on a warm task: p50 ≤ ${maxRatio}× ${baseline}`,
    judge: (r) => ({
      measured: `p50 ${r.latency!.a.p50.toFixed(1)} ms vs ${r.latency!.b.p50.toFixed(1)} ms: ${r.latency!.ratioP50.toFixed(2)}×`,
      met: r.latency!.ratioP50 <= maxRatio,
    }),
  };
}


/** The `ssh` CLI's options for a ControlMaster connection to the fixture (host key not pinned: a throwaway container). */
function sshCliArgs(controlPath: string, keyPath: string, port: number): string[] {
  return [
    '-o', 'BatchMode=yes',
    '-o', 'StrictHostKeyChecking=no',
    '-o', 'UserKnownHostsFile=/dev/null',
    '-o', 'LogLevel=ERROR',
    '-o', `ControlPath=${controlPath}`,
    '-i', keyPath,
    '-p', String(port),
  ];
}

/** The same warm ssh task measured against OpenSSH's own multiplexing: `ssh` with a ControlMaster already up. */
function controlMasterCase(shared: ReturnType<typeof sharedWarmTask>): BenchCase {
  let task: WarmSshTask | undefined;
  let cli: { args: string[]; target: string } | undefined;
  return {
    kind: 'latency',
    name: 'terminal `true`, ssh backend, warm task',
    baselineName: '`ssh HOST true` (OpenSSH CLI) over a ControlMaster, same sshd',
    targets: [ratioTarget('the OpenSSH CLI over a ControlMaster', 0.5)],
    async setup(ctx) {
      const missing = (await ctx.backendMissing('ssh')) ?? (await ctx.dockerUnavailable());
      if (missing !== undefined) return { skip: missing };
      task = await shared.acquire(ctx);
      cli = { args: sshCliArgs(join(task.scratch, 'cm'), task.keyPath, task.port), target: `${task.user}@${task.host}` };
      await run('ssh', [...cli.args, '-o', 'ControlMaster=yes', '-o', 'ControlPersist=120', '-fN', cli.target]);
      await run('ssh', [...cli.args, cli.target, 'true']);
      return undefined;
    },
    runA: () => runTerminal(task!.server, TASK, 'true'),
    runB: async () => {
      await run('ssh', [...cli!.args, cli!.target, 'true']);
    },
    async teardown() {
      if (cli) await run('ssh', [...cli.args, '-O', 'exit', cli.target]).catch(() => undefined);
      await shared.release();
    },
  };
}

export default function cases(): BenchCase[] {
  let task: WarmSshTask | undefined;
  let conn: Client | undefined;
  const shared = sharedWarmTask(2);
  return [
    {
      kind: 'latency',
      name: 'terminal `true`, ssh backend, warm task',
      baselineName: 'ssh2 exec `true` on an open connection, same sshd',
      targets: [ratioTarget('a bare ssh2 exec on an open connection', 1.5)],
      async setup(ctx) {
        const missing = (await ctx.backendMissing('ssh')) ?? (await ctx.dockerUnavailable());
        if (missing !== undefined) return { skip: missing };
        const t = await shared.acquire(ctx);
        task = t;
        const { default: ssh2 } = await import('ssh2');
        const client = new ssh2.Client();
        conn = client;
        await new Promise<void>((resolve, reject) => {
          client.once('ready', () => resolve());
          client.once('error', reject);
          client.connect({ host: t.host, port: t.port, username: t.user, privateKey: t.privateKey });
        });
        await sshExec(client, 'true');
        return undefined;
      },
      runA: () => runTerminal(task!.server, TASK, 'true'),
      runB: () => sshExec(conn!, 'true'),
      async teardown() {
        conn?.end();
        await shared.release();
      },
    },
    controlMasterCase(shared),
  ];
}
