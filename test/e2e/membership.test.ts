/**
 * Executors found by DNS (a test double for the resolver: the test says what
 * the name resolves to) as real `berth executor` processes on loopback
 * addresses 127.0.0.2-4, and two dispatcher replicas that never talk to each
 * other. A membership change must not move a task off the executor holding
 * its environment, and SIGTERM drains an executor: its call in flight
 * finishes, health says NOT_SERVING, a new task goes elsewhere.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createChannel, createClient, type Channel } from 'nice-grpc';
import { HealthDefinition } from 'nice-grpc-server-health';
import { type BackendName } from '../../services/common/config.js';
import { parseConfig } from '../../services/common/config-load.js';
import { silentLogger } from '../../services/common/logging.js';
import { startDispatcher, type RunningDispatcher } from '../../services/dispatcher/dispatcher-main.js';
import { rendezvousPick } from '../../services/dispatcher/executors/executor-router.js';
import { DispatcherDefinition, type DispatcherClient } from '../../services/gen/berth/v1/dispatcher.js';
import { startListeningChild, type ListeningChild } from '../../services/cli/bench/listening-child.js';
import { BERTH_BIN } from '../support/serve-process.js';
import { freePort } from '../support/free-port.js';

const SECRET = 'membership-test-secret';
const NAME = 'executors.berth.test';
const NOT_SERVING = 2;

async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 150; i++) {
    if (await check()) return;
    await sleep(100);
  }
  assert.fail(`timed out waiting until ${what}`);
}

describe('executors from DNS behind two dispatcher replicas', () => {
  let dir: string;
  let port: number;
  const ips = ['127.0.0.2', '127.0.0.3', '127.0.0.4'];
  const executors = new Map<string, { child: ListeningChild; cwd: string }>();
  let answer: string[] = [];
  const dispatchers: RunningDispatcher[] = [];
  const channels: Channel[] = [];
  const clients: DispatcherClient[] = [];

  const run = async (d: number, taskId: string, command: string) =>
    JSON.parse(
      (await clients[d]!.callTool({ name: 'terminal', argumentsJson: JSON.stringify({ command }), taskId, sessionId: '' })).resultJson,
    ) as { output?: string; error?: string | null };
  const addressOf = (ip: string) => `${ip}:${port}`;
  const choice = (members: string[], taskId: string) => rendezvousPick(members.map((ip) => ({ id: addressOf(ip) })), `default/${taskId}`)!.id;
  const cwdOf = (address: string) => executors.get(address.split(':')[0]!)!.cwd;
  const membersSeen = (d: RunningDispatcher) => d.executors().filter((e) => e.healthy).map((e) => e.id).sort().join(',');

  before(async () => {
    dir = realpathSync(mkdtempSync(join(tmpdir(), 'berth-e2e-membership-')));
    port = await freePort();
    await Promise.all(
      ips.map(async (ip) => {
        const cwd = join(dir, ip);
        mkdirSync(cwd);
        const child = await startListeningChild({
          name: `berth executor ${ip}`,
          args: [BERTH_BIN, 'executor', '--backend', 'local', '--host', ip, '--port', String(port)],
          cwd,
          env: { ...process.env, BERTH_EXECUTOR_SECRET: SECRET, BERTH_STATE_ROOT: join(dir, `state-${ip}`), BERTH_LOG_LEVEL: 'warn' },
          startTimeoutMs: 20_000,
        });
        executors.set(ip, { child, cwd });
      }),
    );
    answer = ips.slice(0, 2);
    const source = { dns: NAME, port, backend: 'local' as BackendName };
    const config = parseConfig({
      executor_discovery: [{ dns: NAME, port, backend: 'local' }],
      executor_discovery_interval_ms: 200,
      executor: { shared_secret: SECRET },
    });
    for (let i = 0; i < 2; i++) {
      const d = await startDispatcher({
        config,
        logger: silentLogger(),
        host: '127.0.0.1',
        port: 0,
        executors: [],
        discovery: { sources: [source], intervalMs: 200, sharedSecret: SECRET, resolve: async () => [...answer] },
      });
      dispatchers.push(d);
      const channel = createChannel(d.address);
      channels.push(channel);
      clients.push(createClient(DispatcherDefinition, channel));
    }
  });

  after(async () => {
    for (const c of channels) c.close();
    await Promise.all(dispatchers.map((d) => d.close(0)));
    await Promise.all([...executors.values()].map((e) => e.child.stop('SIGKILL')));
    rmSync(dir, { recursive: true, force: true });
  });

  test('a new member wins some tasks\' rendezvous choice; both replicas keep routing them to their holder', async () => {
    const tasks = Array.from({ length: 24 }, (_, i) => `task-${i}`);
    const home = new Map<string, string>();
    for (const t of tasks) {
      const r = await run(0, t, `export WHO=${t}; pwd`);
      assert.equal(r.error, null);
      home.set(t, r.output!);
      assert.equal(r.output, cwdOf(choice(answer, t)), `${t} starts on its rendezvous choice`);
    }

    answer = [...ips];
    const all = ips.map(addressOf).sort().join(',');
    await until('both dispatchers route to the third executor', () => dispatchers.every((d) => membersSeen(d) === all));
    const moved = tasks.filter((t) => choice(ips, t) === addressOf(ips[2]!));
    assert.ok(moved.length > 0, 'the new executor is now the rendezvous choice of some existing tasks');

    // Replica 1 never saw these tasks: it asks the executors who holds them.
    for (const d of [1, 0]) {
      for (const t of tasks) {
        assert.deepEqual(await run(d, t, 'echo "$WHO $(pwd)"'), { output: `${t} ${home.get(t)}`, exit_code: 0, error: null }, `${t} via dispatcher ${d}`);
      }
    }
    const fresh = Array.from({ length: 40 }, (_, i) => `new-${i}`).find((t) => choice(ips, t) === addressOf(ips[2]!))!;
    assert.equal((await run(1, fresh, 'pwd')).output, cwdOf(addressOf(ips[2]!)), 'a new task goes to the new executor');
  });

  test('SIGTERM drains an executor: its call in flight finishes, health says NOT_SERVING, new tasks go elsewhere', async () => {
    const draining = ips[0]!;
    const target = executors.get(draining)!;
    const onIt = Array.from({ length: 60 }, (_, i) => `drain-${i}`).filter((t) => choice(ips, t) === addressOf(draining));
    const [busy, newcomer] = onIt;
    assert.ok(busy !== undefined && newcomer !== undefined);
    const bystander = Array.from({ length: 60 }, (_, i) => `stay-${i}`).find((t) => choice(ips, t) === addressOf(ips[1]!))!;
    assert.equal((await run(1, bystander, 'export KEEP=kept')).error, null);

    const marker = join(target.cwd, `started-${busy}`);
    const inFlight = run(0, busy, `touch ${marker}; sleep 2; echo finished`);
    await until('the call runs on its executor', () => existsSync(marker));
    target.child.child.kill('SIGTERM');

    const healthChannel = createChannel(addressOf(draining));
    try {
      const health = createClient(HealthDefinition, healthChannel);
      await until('the draining executor says NOT_SERVING', async () => (await health.check({ service: '' })).status === NOT_SERVING);
    } finally {
      healthChannel.close();
    }
    const elsewhere = await run(1, newcomer, 'pwd');
    assert.equal(elsewhere.error, null);
    assert.notEqual(elsewhere.output, target.cwd, 'the new task went to another executor');

    assert.deepEqual(await inFlight, { output: 'finished', exit_code: 0, error: null });
    assert.equal(await target.child.exited, 0, 'the executor exits cleanly once its call is done');

    const lost = await run(0, busy, 'echo again');
    assert.match(String(lost.error), new RegExp(`environment of task '${busy}' was lost: its executor \\(${addressOf(draining).replace(/\./g, '\\.')}\\)`));
    assert.equal((await run(0, busy, 'echo again')).output, 'again', 'after the one error the task continues elsewhere');
    assert.equal((await run(1, bystander, 'echo $KEEP')).output, 'kept', 'a task on another executor notices nothing');
  });
});

describe('executor discovery settings', () => {
  test('unreadable TLS files of a discovery entry stop the start with the entry named', async () => {
    const config = parseConfig({ executor_discovery: [{ dns: NAME, backend: 'local', tls: { cert_file: '/nonexistent/c.pem', key_file: '/nonexistent/k.pem' } }] });
    await assert.rejects(
      startDispatcher({
        config,
        logger: silentLogger(),
        host: '127.0.0.1',
        port: 0,
        executors: [],
        discovery: {
          sources: [{ dns: NAME, port: 7701, backend: 'local', tls: { certFile: '/nonexistent/c.pem', keyFile: '/nonexistent/k.pem' } }],
          intervalMs: 1000,
          sharedSecret: '',
          resolve: async () => [],
        },
      }),
      (err: Error) => err.name === 'ConfigError' && err.message.startsWith(`executor_discovery[0].tls (${NAME})`),
    );
  });
});
