/**
 * Interrupt end to end through `bin/berth serve` and the `berth/client`
 * TypeScript client, on the local backend: a task's first execute_code
 * prints, then sleeps; once what it printed is out, Interrupt ends it, and
 * the result keeps that output, says it was interrupted, and comes back long
 * before the script would have finished (its sleep is far longer than the
 * test's timeout), with the script's process gone. Unary calls and the
 * Session stream alike. Interrupted while the new task's login shell still
 * starts (held by a profile that waits for a file; the local backend runs
 * the login shell once per environment definition, so the test changes the
 * profile to make the new task's environment take it again), the answer
 * comes at once and the script never runs. The other stages (admission, environment
 * creation, ...) are test/integration/interrupt-stages.test.ts.
 */
import assert from 'node:assert/strict';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BerthClient, type SessionEvent } from '../../services/client/index.js';
import { pidsRunning, uniqueSleepSeconds, waitUntil } from '../support/host-processes.js';
import { pythonBinDir } from '../support/python-bin.js';
import { startServe, type ServeProcess } from '../support/serve-process.js';

const INTERRUPTED = '\n[execution interrupted — user sent a new message]';

describe('interrupting execute_code through berth serve and berth/client', () => {
  let serve: ServeProcess;
  let scratch: string;
  let berth: BerthClient;

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'berth-e2e-intr-'));
    const work = join(scratch, 'work');
    mkdirSync(work);
    const config = join(scratch, 'config.yaml');
    writeFileSync(config, `terminal:\n  cwd: ${JSON.stringify(work)}\ncode_execution:\n  timeout: 600\n`);
    // A login profile that, while $HOME/hold exists, holds a new task's shell start (a slow profile, without timing).
    writeFileSync(
      join(scratch, '.bash_profile'),
      'if [ -e "$HOME/hold" ]; then : > "$HOME/held"; while [ -e "$HOME/hold" ]; do sleep 0.05; done; fi\n',
    );
    serve = await startServe(['--config', config], { env: { PATH: `${pythonBinDir(scratch)}:${process.env.PATH ?? ''}`, HOME: scratch } });
    berth = new BerthClient(serve.address);
  });

  after(async () => {
    berth.close();
    await serve.stop();
    rmSync(scratch, { recursive: true, force: true });
  });

  /** A script that prints, leaves `marker` once its output is out, then sleeps far beyond the test's timeout. */
  function printingScript(marker: string, seconds: string): string {
    return [
      'import subprocess',
      'print("started", flush=True)',
      `open(${JSON.stringify(marker)}, "w").write("printed")`,
      `subprocess.run(["sleep", "${seconds}"])`,
      'print("finished")',
    ].join('\n');
  }

  test("a task's first execute_code, interrupted once it printed: unary call", async () => {
    const task = berth.task('intr-unary');
    const marker = join(scratch, 'unary.marker');
    const seconds = uniqueSleepSeconds(3600);
    const call = task.executeCode({ code: printingScript(marker, seconds) });
    await waitUntil('the script to print', () => existsSync(marker));
    assert.equal(await task.interrupt(), 1);
    const result = await call;
    assert.equal(result.status, 'interrupted');
    assert.equal(result.output, `started\n${INTERRUPTED}`);
    // The answer came before the script would have finished; nothing of it is left running.
    await waitUntil('the interrupted script to exit', () => pidsRunning(`sleep ${seconds}`).length === 0);
  });

  test("a task's first execute_code, interrupted while the task's shell starts: answered at once, the script never runs", async () => {
    const task = berth.task('intr-bootstrap');
    const marker = join(scratch, 'bootstrap.marker');
    const hold = join(scratch, 'hold');
    writeFileSync(hold, '');
    // Earlier tasks' login shell is shared by new tasks until a startup file changes: change it, so this task's runs.
    appendFileSync(join(scratch, '.bash_profile'), '# changed for intr-bootstrap\n');
    let answer: Awaited<ReturnType<typeof task.executeCode>>;
    try {
      const call = task.executeCode({ code: printingScript(marker, uniqueSleepSeconds(3600)) });
      await waitUntil("the task's login shell to start", () => existsSync(join(scratch, 'held')));
      assert.equal(await task.interrupt(), 1);
      // Answered while the shell start is still held.
      answer = await call;
    } finally {
      unlinkSync(hold);
    }
    assert.deepEqual([answer.status, answer.output], ['interrupted', INTERRUPTED]);
    // The task works once its shell is up (a later script goes the way the interrupted one would have),
    // and the interrupted script never ran.
    assert.equal((await task.executeCode({ code: 'print("ready")' })).output, 'ready\n');
    assert.equal(existsSync(marker), false);
  });

  test("a task's first execute_code, interrupted once it printed: Session stream", async () => {
    const task = berth.task('intr-session');
    const marker = join(scratch, 'session.marker');
    const seconds = uniqueSleepSeconds(3600);
    await using session = task.session();
    const events: SessionEvent[] = [];
    const done = (async () => {
      for await (const event of session.run('execute_code', { code: printingScript(marker, seconds) })) events.push(event);
    })();
    await waitUntil('the script to print', () => existsSync(marker));
    assert.equal(await task.interrupt(), 1);
    await done;
    const last = events.at(-1);
    assert.equal(last?.type, 'result');
    const result = (last as Extract<SessionEvent, { type: 'result' }>).result as { status: string; output: string };
    assert.deepEqual([result.status, result.output], ['interrupted', `started\n${INTERRUPTED}`]);
    await waitUntil('the interrupted script to exit', () => pidsRunning(`sleep ${seconds}`).length === 0);
  });
});
