/**
 * The split deployment: `berth dispatcher` routing to two `berth executor`
 * processes. A task stays on one executor; when that executor dies, the next
 * call says the environment was lost and the task continues on the other.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createChannel, createClient, type Channel } from 'nice-grpc';
import { DispatcherDefinition, type DispatcherClient } from '../../services/gen/berth/v1/dispatcher.js';
import { rendezvousPick } from '../../services/dispatcher/executors/executor-router.js';
import { startListeningChild, type ListeningChild } from '../../services/cli/bench/listening-child.js';
import { BERTH_BIN, REPO_ROOT } from '../support/serve-process.js';

function startBerth(args: string[], env: NodeJS.ProcessEnv): Promise<ListeningChild> {
  return startListeningChild({
    name: `berth ${args[0]}`,
    args: [BERTH_BIN, ...args],
    cwd: REPO_ROOT,
    env: { ...process.env, ...env },
    startTimeoutMs: 20_000,
  });
}

describe('berth dispatcher with two executors', () => {
  let dir: string;
  let executors: ListeningChild[] = [];
  let dispatcher: ListeningChild;
  let channel: Channel;
  let client: DispatcherClient;

  const run = async (taskId: string, command: string) =>
    JSON.parse(
      (await client.callTool({ name: 'terminal', argumentsJson: JSON.stringify({ command }), taskId, sessionId: '' }))
        .resultJson,
    ) as { output?: string; error?: string | null };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-e2e-split-'));
    const env = { BERTH_EXECUTOR_SECRET: 'split-test-secret', BERTH_LOG_LEVEL: 'warn' };
    executors = await Promise.all(
      ['a', 'b'].map((n) =>
        startBerth(['executor', '--backend', 'local', '--port', '0'], { ...env, BERTH_STATE_ROOT: join(dir, n) }),
      ),
    );
    const config = join(dir, 'dispatcher.yaml');
    writeFileSync(
      config,
      `executors:\n${executors.map((e) => `  - { address: "${e.address}", backend: local }`).join('\n')}\n`,
    );
    dispatcher = await startBerth(['dispatcher', '--config', config, '--port', '0'], env);
    channel = createChannel(dispatcher.address);
    client = createClient(DispatcherDefinition, channel);
  });

  after(async () => {
    channel?.close();
    await Promise.all([dispatcher, ...executors].filter(Boolean).map((s) => s.stop()));
    rmSync(dir, { recursive: true, force: true });
  });

  test('tasks keep state on their executor; a dead executor\'s tasks are told and move', async () => {
    const ids = executors.map((e) => ({ id: e.address }));
    const tasks = Array.from({ length: 12 }, (_, i) => `task-${i}`);
    const home = new Map(tasks.map((t) => [t, rendezvousPick(ids, `default/${t}`)!.id]));
    const onA = tasks.filter((t) => home.get(t) === executors[0]!.address);
    const onB = tasks.filter((t) => home.get(t) === executors[1]!.address);
    assert.ok(onA.length > 0 && onB.length > 0, 'tasks spread over both executors');

    for (const t of tasks) assert.equal((await run(t, `export WHO=${t}`)).error, null);
    for (const t of tasks) assert.equal((await run(t, 'echo $WHO')).output, t);

    await executors[0]!.stop('SIGKILL');
    // The dispatcher notices within its health-check interval.
    let lost: { error?: string | null } = {};
    for (let i = 0; i < 50; i++) {
      try {
        lost = await run(onA[0]!, 'echo $WHO');
        if (lost.error) break;
      } catch {
        // UNAVAILABLE until the health check marks the executor down.
      }
      await sleep(200);
    }
    assert.match(String(lost.error), /environment of task 'task-\d+' was lost/);
    const fresh = await run(onA[0]!, 'echo "[$WHO]"');
    assert.deepEqual(fresh, { output: '[]', exit_code: 0, error: null });
    for (const t of onB) assert.equal((await run(t, 'echo $WHO')).output, t, `${t} kept its state on the live executor`);
  });
});
