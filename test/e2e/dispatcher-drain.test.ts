/**
 * SIGTERM to `berth dispatcher`: it stops taking calls, lets the calls in
 * flight (unary and on an open Session stream) finish within
 * server.shutdown_grace_ms, then exits cleanly.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ClientError, Status, createChannel, createClient } from 'nice-grpc';
import { AsyncQueue } from '../../services/common/async-queue.js';
import { DispatcherDefinition, type SessionClientMessage } from '../../services/gen/berth/v1/dispatcher.js';
import { startListeningChild, type ListeningChild } from '../../services/cli/bench/listening-child.js';
import { BERTH_BIN, REPO_ROOT } from '../support/serve-process.js';

const SECRET = 'dispatcher-drain-secret';

async function until(what: string, check: () => boolean): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (check()) return;
    await sleep(50);
  }
  assert.fail(`timed out waiting until ${what}`);
}

describe('berth dispatcher on SIGTERM', () => {
  let dir: string;
  let executor: ListeningChild;
  let dispatcher: ListeningChild;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-e2e-dispatcher-drain-'));
    const env = { ...process.env, BERTH_EXECUTOR_SECRET: SECRET, BERTH_LOG_LEVEL: 'warn' };
    executor = await startListeningChild({
      name: 'berth executor',
      args: [BERTH_BIN, 'executor', '--backend', 'local', '--port', '0'],
      cwd: dir,
      env: { ...env, BERTH_STATE_ROOT: join(dir, 'state') },
    });
    const config = join(dir, 'dispatcher.yaml');
    writeFileSync(config, `server: { shutdown_grace_ms: 20000 }\nexecutors:\n  - { address: "${executor.address}", backend: local }\n`);
    dispatcher = await startListeningChild({
      name: 'berth dispatcher',
      args: [BERTH_BIN, 'dispatcher', '--config', config, '--port', '0'],
      cwd: REPO_ROOT,
      env,
    });
  });

  after(async () => {
    await Promise.all([dispatcher, executor].filter(Boolean).map((c) => c.stop('SIGKILL')));
    rmSync(dir, { recursive: true, force: true });
  });

  test('calls in flight, unary and on a Session stream, finish; new calls are refused; it exits 0', async () => {
    const channel = createChannel(dispatcher.address);
    const client = createClient(DispatcherDefinition, channel);
    try {
      const marker = (name: string) => join(dir, name);
      const unary = client.callTool({
        name: 'terminal',
        argumentsJson: JSON.stringify({ command: `touch ${marker('unary')}; sleep 2; echo unary-done` }),
        taskId: 'drain-unary',
        sessionId: '',
      });
      const outgoing = new AsyncQueue<SessionClientMessage>();
      const stream = client.session(outgoing);
      outgoing.push({
        message: {
          $case: 'call',
          value: {
            callId: 'c1',
            request: {
              name: 'terminal',
              argumentsJson: JSON.stringify({ command: `touch ${marker('session')}; sleep 2; echo session-done` }),
              taskId: 'drain-session',
              sessionId: 's1',
            },
          },
        },
      });
      const sessionResult = (async () => {
        for await (const m of stream) {
          if (m.message?.$case === 'result') {
            outgoing.close();
            return m.message.value;
          }
        }
        return undefined;
      })();
      await until('both commands run', () => existsSync(marker('unary')) && existsSync(marker('session')));
      dispatcher.child.kill('SIGTERM');
      await sleep(300);

      const late = createChannel(dispatcher.address);
      try {
        await assert.rejects(
          createClient(DispatcherDefinition, late).callTool({ name: 'terminal', argumentsJson: '{"command":"true"}', taskId: 'late', sessionId: '' }),
          (err: unknown) => err instanceof ClientError && err.code === Status.UNAVAILABLE,
          'a draining dispatcher takes no new calls',
        );
      } finally {
        late.close();
      }
      assert.deepEqual(JSON.parse((await unary).resultJson), { output: 'unary-done', exit_code: 0, error: null });
      const r = await sessionResult;
      assert.equal(r?.errorStatus, '');
      assert.deepEqual(JSON.parse(r?.resultJson ?? '{}'), { output: 'session-done', exit_code: 0, error: null });
      assert.equal(await dispatcher.exited, 0);
    } finally {
      channel.close();
    }
  });
});
