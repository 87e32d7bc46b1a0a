/**
 * The berth command as a person meets it, through the real binary: each
 * mistake is one line on stderr naming the problem and the fix, every
 * command has its own help with an example, and `berth serve` says where
 * new tasks start.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { COMMAND_NAMES } from '../../services/cli/command-help.js';
import { BERTH_BIN, REPO_ROOT, startServe, waitForLog, type ServeProcess } from '../support/serve-process.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Where the servers these tests start keep their state (removed at the end). */
const stateRoot = mkdtempSync(join(tmpdir(), 'berth-e2e-cli-state-'));
after(() => rmSync(stateRoot, { recursive: true, force: true }));

function berth(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BERTH_BIN, ...args],
      { cwd: options.cwd ?? REPO_ROOT, env: { ...process.env, BERTH_LOG_LEVEL: 'warn', BERTH_STATE_ROOT: stateRoot, ...options.env }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

async function occupiedPort(): Promise<{ server: Server; port: number }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port };
}

describe('one-line errors with the fix', () => {
  for (const [command, api, setting] of [
    [['serve'], 'the Dispatcher API', '--port N (server.port, BERTH_PORT)'],
    [['executor', '--backend', 'local'], 'the Executor API', '--port N (executor.port)'],
  ] as const) {
    test(`${command[0]} on a port in use`, async () => {
      const { server, port } = await occupiedPort();
      try {
        const r = await berth([...command, '--port', String(port)]);
        assert.equal(r.code, 1);
        assert.equal(
          r.stderr,
          `berth: cannot serve ${api} on 127.0.0.1:${port}: the port is in use by another process (another berth?); stop it, or choose another port with ${setting}\n`,
        );
      } finally {
        server.close();
      }
    });
  }

  test('an unknown flag, with the closest flag or the command that has it', async () => {
    const typo = await berth(['serve', '--prot', '7700']);
    assert.equal(typo.code, 2);
    assert.equal(typo.stderr, "berth: unknown flag --prot for 'berth serve'; did you mean '--port'? ('berth serve --help' lists them)\n");
    const elsewhere = await berth(['serve', '--listen', '127.0.0.1:7710']);
    assert.equal(elsewhere.code, 2);
    assert.equal(elsewhere.stderr, "berth: unknown flag --listen for 'berth serve'; berth mcp has it ('berth serve --help' lists them)\n");
    const noValue = await berth(['call', 'terminal', '--task']);
    assert.equal(noValue.stderr, "berth: --task needs a value, e.g. --task VALUE ('berth call --help' lists them)\n");
  });

  test('an unknown command, with the closest command', async () => {
    const r = await berth(['serv']);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, "berth: unknown command 'serv'; did you mean 'serve'? ('berth --help' lists the commands)\n");
  });

  test('ARGS_JSON that is not an object is refused before connecting', async () => {
    // No server at this address: the check comes first.
    const r = await berth(['call', 'terminal', '["ls"]', '--server', '127.0.0.1:1']);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, `berth: ARGS_JSON must be a JSON object of the tool's arguments, got an array; e.g. berth call terminal '{"name":"value"}'\n`);
  });
});

describe('berth suspend / resume usage', () => {
  for (const command of ['suspend', 'resume']) {
    test(`berth ${command} without a task id (or with two) is a usage error that shows the form`, async () => {
      for (const args of [[command], [command, 'a', 'b']]) {
        const r = await berth(args);
        assert.equal(r.code, 2, r.stderr);
        assert.equal(r.stderr, `berth: berth ${command} takes one task id, e.g. berth ${command} t1 ('berth ${command} --help' shows its flags)\n`);
      }
    });
  }
});

describe('help', () => {
  for (const command of COMMAND_NAMES) {
    test(`berth ${command} --help: its own synopsis and an example`, async () => {
      const r = await berth([command, '--help']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, new RegExp(`^Usage: berth ${command}\\b`));
      assert.match(r.stdout, /\nExample[^\n]*:\n {2}\S/);
      assert.equal((await berth(['help', command])).stdout, r.stdout);
    });
  }

  test('berth --help lists every command', async () => {
    const r = await berth(['--help']);
    for (const command of COMMAND_NAMES) assert.match(r.stdout, new RegExp(`\\n {2}${command} `));
  });
});

describe('where new tasks start', () => {
  let serve: ServeProcess;
  let workspace: string;
  before(async () => {
    workspace = realpathSync(mkdtempSync(join(tmpdir(), 'berth-e2e-workspace-')));
    serve = await startServe([], { env: { TERMINAL_CWD: workspace } });
  });
  after(async () => {
    await serve.stop();
    rmSync(workspace, { recursive: true, force: true });
  });

  test('terminal.cwd is where a new local task starts, and the start-up line says so', async () => {
    const line = /berth serving on [^\n]*/.exec(serve.startupOutput)?.[0] ?? '';
    assert.match(line, new RegExp(`^berth serving on 127\\.0\\.0\\.1:\\d+ \\(backend local; new tasks start in ${workspace}\\)$`));
    const r = await serve.cli(['call', 'terminal', '{"command":"pwd"}', '--task', 'where']);
    assert.equal(JSON.parse(r.stdout).output, workspace);
  });

  test('started in its own checkout, berth serve warns that agents would work there', async () => {
    const inCheckout = await startServe([], { env: { TERMINAL_CWD: '' } });
    try {
      await waitForLog(inCheckout, /own source checkout/);
      assert.match(inCheckout.logs(), /new local tasks start in Berth's own source checkout, where agents' commands would change it: set terminal\.cwd \(TERMINAL_CWD\)/);
    } finally {
      await inCheckout.stop();
    }
    assert.doesNotMatch(serve.logs(), /own source checkout/);
  });
});
