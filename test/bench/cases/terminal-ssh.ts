/**
 * A trivial command on a warm ssh task, through the whole stack, against
 * `true` run over an already open ssh2 connection to the same sshd (the
 * real OpenSSH server of the test fixture, in a container).
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { Client } from 'ssh2';
import type { BenchCase } from '../bench-case.js';
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
function controlMasterCase(): BenchCase {
  let sshd: { stop(): Promise<void> } | undefined;
  let server: BenchServer | undefined;
  let scratch: string | undefined;
  let cli: { args: string[]; target: string } | undefined;
  return {
    kind: 'latency',
    name: 'terminal `true`, ssh backend, warm task',
    baselineName: '`ssh HOST true` (OpenSSH CLI) over a ControlMaster, same sshd',
    async setup(ctx) {
      const missing = (await ctx.backendMissing('ssh')) ?? (await ctx.dockerUnavailable());
      if (missing !== undefined) return { skip: missing };
      const fixture = await import('../../support/sshd-container.js');
      const started = await fixture.startSshd();
      sshd = started;
      scratch = mkdtempSync(join(tmpdir(), 'berth-bench-ssh-cm-'));
      const keyPath = join(scratch, 'id_ed25519');
      writeFileSync(keyPath, started.keys.privateKey);
      chmodSync(keyPath, 0o600);
      const s = await ctx.server({
        backend: 'ssh',
        config: {
          terminal: { ssh_host: started.host, ssh_port: started.port, ssh_user: started.user, ssh_key: keyPath },
        },
      });
      server = s;
      await unmeasured(ctx, 'warming the ssh task', () => runTerminal(s, TASK, 'true'));
      cli = { args: sshCliArgs(join(scratch, 'cm'), keyPath, started.port), target: `${started.user}@${started.host}` };
      await run('ssh', [...cli.args, '-o', 'ControlMaster=yes', '-o', 'ControlPersist=120', '-fN', cli.target]);
      await run('ssh', [...cli.args, cli.target, 'true']);
      return undefined;
    },
    runA: () => runTerminal(server!, TASK, 'true'),
    runB: async () => {
      await run('ssh', [...cli!.args, cli!.target, 'true']);
    },
    async teardown() {
      if (cli) await run('ssh', [...cli.args, '-O', 'exit', cli.target]).catch(() => undefined);
      await server?.endTask(TASK).catch(() => undefined);
      await sshd?.stop();
      if (scratch !== undefined) rmSync(scratch, { recursive: true, force: true });
    },
  };
}

export default function cases(): BenchCase[] {
  let sshd: { stop(): Promise<void> } | undefined;
  let conn: Client | undefined;
  let server: BenchServer | undefined;
  let scratch: string | undefined;
  return [
    {
      kind: 'latency',
      name: 'terminal `true`, ssh backend, warm task',
      baselineName: 'ssh2 exec `true` on an open connection, same sshd',
      async setup(ctx) {
        const missing = (await ctx.backendMissing('ssh')) ?? (await ctx.dockerUnavailable());
        if (missing !== undefined) return { skip: missing };
        // Loaded only here: the fixture pulls in testcontainers.
        const fixture = await import('../../support/sshd-container.js');
        const started = await fixture.startSshd();
        sshd = started;
        scratch = mkdtempSync(join(tmpdir(), 'berth-bench-ssh-'));
        const keyPath = join(scratch, 'id_ed25519');
        writeFileSync(keyPath, started.keys.privateKey);
        chmodSync(keyPath, 0o600);
        const s = await ctx.server({
          backend: 'ssh',
          config: {
            terminal: { ssh_host: started.host, ssh_port: started.port, ssh_user: started.user, ssh_key: keyPath },
          },
        });
        server = s;
        await unmeasured(ctx, 'warming the ssh task', () => runTerminal(s, TASK, 'true'));
        const { default: ssh2 } = await import('ssh2');
        const client = new ssh2.Client();
        conn = client;
        await new Promise<void>((resolve, reject) => {
          client.once('ready', () => resolve());
          client.once('error', reject);
          client.connect({ host: started.host, port: started.port, username: started.user, privateKey: started.keys.privateKey });
        });
        await sshExec(client, 'true');
        return undefined;
      },
      runA: () => runTerminal(server!, TASK, 'true'),
      runB: () => sshExec(conn!, 'true'),
      async teardown() {
        conn?.end();
        await server?.endTask(TASK).catch(() => undefined);
        await sshd?.stop();
        if (scratch !== undefined) rmSync(scratch, { recursive: true, force: true });
      },
    },
    controlMasterCase(),
  ];
}
