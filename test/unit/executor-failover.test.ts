/**
 * The dispatcher's side of failover (docs/deploying.md, "Failover and
 * fencing"): the real health watcher, router and dispatcher in front of
 * executor doubles. Each double answers the standard gRPC health check on a
 * real local port (the watcher's own client reaches it) and runs a task's
 * commands through a fake Executor client that says which executor ran them.
 * A double can be killed (its port closed, its calls failing UNAVAILABLE as a
 * dead executor's do), stopped (its port open, health checks never answered,
 * as under SIGSTOP) and continued. The periodic checks are run by hand, one
 * round at a time, so nothing here depends on timing.
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { AbortError, isAbortError } from 'abort-controller-x';
import { ClientError, Status, createChannel, createServer, type Channel, type Server } from 'nice-grpc';
import { HealthDefinition } from 'nice-grpc-server-health';
import { parseConfig } from '../../services/common/config-load.js';
import { silentLogger } from '../../services/common/logging.js';
import { Dispatcher } from '../../services/dispatcher/dispatcher.js';
import { ExecutorHealthWatcher } from '../../services/dispatcher/executors/executor-health.js';
import { ExecutorRouter, rendezvousPick, type ExecutorEndpoint } from '../../services/dispatcher/executors/executor-router.js';
import { lostEnvironmentMessage } from '../../services/dispatcher/executors/task-placements.js';
import { ToolRegistry } from '../../services/dispatcher/registry/registry.js';
import type { ExecutorClient } from '../../services/gen/berth/v1/executor.js';

const TENANT = 'acme';
/** grpc.health.v1 SERVING and NOT_SERVING (draining). */
const SERVING = 1;
const NOT_SERVING = 2;

type State = 'serving' | 'stopped' | 'killed' | 'draining';

/** One executor double: its health port, its endpoint as the router sees it, the tasks it ran commands for. */
interface ExecutorDouble {
  readonly id: string;
  readonly endpoint: ExecutorEndpoint;
  readonly channel: Channel;
  readonly server: Server;
  state: State;
  /** Calls reaching its Executor API fail once with UNAVAILABLE (a dropped connection), though it answers health checks. */
  dropNextCall: boolean;
  /** The tasks it ran commands for, in order. */
  readonly ran: string[];
  /** While set, a command that reaches it waits for this (or its call's abort) before it answers: a call in flight. */
  gate: { reached: () => void; opened: Promise<void> } | undefined;
}

/** Holds the commands reaching `double`: `reached` when one is in flight, `open` lets it answer. */
function hold(double: ExecutorDouble): { reached: Promise<void>; open: () => void } {
  let reached!: () => void;
  let open!: () => void;
  const inFlight = new Promise<void>((resolve) => (reached = resolve));
  double.gate = { reached, opened: new Promise<void>((resolve) => (open = resolve)) };
  return { reached: inFlight, open };
}

async function startDouble(id: string): Promise<ExecutorDouble> {
  const server = createServer();
  const ran: string[] = [];
  const control: { state: State; dropNextCall: boolean; gate: ExecutorDouble['gate'] } = { state: 'serving', dropNextCall: false, gate: undefined };
  server.add(HealthDefinition, {
    async check(_request, context) {
      if (control.state === 'stopped') {
        // A stopped process accepts the connection and answers nothing.
        await new Promise((resolve) => context.signal.addEventListener('abort', resolve));
      }
      return { status: control.state === 'draining' ? NOT_SERVING : SERVING };
    },
    async *watch() {
      throw new ClientError('/grpc.health.v1.Health/Watch', Status.UNIMPLEMENTED, 'not used');
    },
  });
  const port = await server.listen('127.0.0.1:0');
  const client = {
    async *exec(request: { task?: { taskId: string } }, options: { signal?: AbortSignal } = {}) {
      const taskId = request.task?.taskId ?? '';
      if (control.state === 'killed' || control.dropNextCall) {
        control.dropNextCall = false;
        throw new ClientError('/berth.v1.Executor/Exec', Status.UNAVAILABLE, 'No connection established');
      }
      assert.equal(control.state, 'serving', `a call for ${taskId} reached ${id} while it was stopped`);
      ran.push(taskId);
      const gate = control.gate;
      if (gate) {
        gate.reached();
        // What nice-grpc does when the call's signal is aborted: the stream ends with an AbortError.
        const aborted = new Promise<never>((_, reject) => options.signal?.addEventListener('abort', () => reject(new AbortError())));
        await Promise.race([gate.opened, aborted]);
      }
      yield {
        event: {
          $case: 'exit' as const,
          value: { output: `ran on ${id}`, exitCode: 0, timedOut: false, interrupted: false, notices: [], startCwd: '', endCwd: '', environmentRecreated: false },
        },
      };
    },
    taskUsage() {
      if (control.state !== 'serving') return Promise.reject(new ClientError('/berth.v1.Executor/TaskUsage', Status.UNAVAILABLE, 'no answer'));
      return Promise.resolve({ tasks: [...new Set(ran)].map((taskId) => ({ task: { tenant: TENANT, taskId } })) });
    },
  } as unknown as ExecutorClient;
  const double: ExecutorDouble = Object.assign(control, {
    id,
    endpoint: { id, backend: 'docker' as const, client, healthy: true },
    channel: createChannel(`127.0.0.1:${port}`),
    server,
    ran,
  });
  return double;
}

/** A tool that runs one command in the task's environment and returns what the executor said. */
function registry(): ToolRegistry {
  const tools = new ToolRegistry({ logger: silentLogger() });
  tools.register({
    name: 'run',
    toolset: 'test',
    schema: { name: 'run', description: 'runs a command', parameters: { type: 'object', properties: {} } },
    handler: async (_args, context) => JSON.stringify({ output: (await context.task.exec({ command: 'true', timeoutMs: 1000 })).output }),
  });
  return tools;
}

const cleanups: Array<() => void> = [];
after(() => {
  for (const cleanup of cleanups) cleanup();
});

/**
 * Two or more executors behind a dispatcher. `explain`: how a failed check is
 * explained (the TLS probe in production).
 */
async function fleet(ids: string[], options: { failures?: number; explain?: (details: string) => Promise<string> } = {}) {
  const doubles = await Promise.all(ids.map((id) => startDouble(id)));
  cleanups.push(() => {
    for (const d of doubles) {
      d.channel.close();
      d.server.forceShutdown();
    }
  });
  const failures = options.failures ?? 3;
  const watcher = new ExecutorHealthWatcher(
    doubles.map((d) => ({ endpoint: d.endpoint, channel: d.channel, ...(options.explain ? { explain: options.explain } : {}) })),
    // The interval never passes: the test runs each round itself.
    { intervalMs: 3_600_000, timeoutMs: 500, failuresBeforeDown: failures, logger: silentLogger() },
  );
  await watcher.checkAll();
  const endpoints = doubles.map((d) => d.endpoint);
  const router = new ExecutorRouter(endpoints, () => ({ backend: 'docker' }), (id) => watcher.confirmDown(id));
  const dispatcher = new Dispatcher({ registry: registry(), router, terminal: parseConfig({}).terminal, logger: silentLogger() });
  const call = async (taskId: string, signal = new AbortController().signal) =>
    JSON.parse(await dispatcher.callTool(TENANT, { name: 'run', argumentsJson: '{}', taskId, sessionId: '' }, { signal })) as {
      output?: string;
      error?: string;
    };
  /** A task id whose rendezvous choice among all the executors is `id`. */
  const taskOn = (id: string, name: string) => {
    for (let i = 0; ; i++) {
      const taskId = `${name}-${i}`;
      if (rendezvousPick(endpoints, `${TENANT}/${taskId}`)?.id === id) return taskId;
    }
  };
  /** Where a new task whose usual executor is `id` goes now. */
  const newTaskGoesTo = (id: string, name: string) => router.route(TENANT, taskOn(id, name)).executorId;
  const by = (id: string) => doubles.find((d) => d.id === id)!;
  /** A task with its environment on `id` (its first call ran there). */
  const taskStartedOn = async (id: string, name: string) => {
    const taskId = taskOn(id, name);
    assert.deepEqual(await call(taskId), { output: `ran on ${id}` });
    return taskId;
  };
  return { doubles, by, watcher, router, call, taskOn, taskStartedOn, newTaskGoesTo };
}

/** A call of `task` in flight on `double`: its command reached the executor, which has not answered. `open` lets it answer. */
async function callInFlight(f: Awaited<ReturnType<typeof fleet>>, double: ExecutorDouble, task: string, signal?: AbortSignal) {
  const gate = hold(double);
  const pending = f.call(task, signal);
  await gate.reached;
  return { pending, open: gate.open };
}

/** `count` rounds of health checks. */
async function rounds(f: Awaited<ReturnType<typeof fleet>>, count: number): Promise<void> {
  for (let i = 0; i < count; i++) await f.watcher.checkAll();
}

/** Executors a:1 and b:1, and a task whose environment is on a:1. */
async function taskOnA(name: string, options: Parameters<typeof fleet>[1] = {}) {
  const f = await fleet(['a:1', 'b:1'], options);
  return { f, a: f.by('a:1'), task: await f.taskStartedOn('a:1', name) };
}

const lost = (taskId: string, executorId: string) => ({ error: lostEnvironmentMessage(taskId, executorId, 'unreachable') });

/** Whether `promise` has settled once everything already due has run (no timer involved). */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  const pending = Symbol('pending');
  const tick = new Promise((resolve) => setImmediate(() => resolve(pending)));
  return (await Promise.race([promise.then(() => true, () => true), tick])) !== pending;
}

describe('failover on the dispatcher', () => {
  test(`a stopped executor leaves rotation after executor_health_failures missed checks in a row; its task gets one error, then runs elsewhere`, async () => {
    const { f, a, task } = await taskOnA('stopped', { failures: 3 });

    a.state = 'stopped';
    await f.watcher.checkAll();
    await f.watcher.checkAll();
    assert.equal(f.newTaskGoesTo('a:1', 'fresh'), 'a:1', 'two missed checks of three: still in rotation (a busy machine misses some)');
    await f.watcher.checkAll();
    assert.equal(f.newTaskGoesTo('a:1', 'fresh'), 'b:1', 'the third missed check takes it out of rotation');
    const fresh = f.taskOn('a:1', 'fresh');
    assert.deepEqual(await f.call(fresh), { output: 'ran on b:1' }, 'a new task is placed on the other executor');

    assert.deepEqual(await f.call(task), lost(task, 'a:1'), "the task's next call is its one error");
    assert.deepEqual(await f.call(task), { output: 'ran on b:1' }, 'the call after runs on the other executor');
    assert.deepEqual(await f.call(task), { output: 'ran on b:1' }, 'and the task stays there, with no second error');
    assert.deepEqual(a.ran, [task], 'nothing reached the stopped executor after it stopped');
  });

  test('a missed check between answered ones does not count toward taking an executor out', async () => {
    const { f, a } = await taskOnA('flaky', { failures: 2 });
    for (let round = 0; round < 3; round++) {
      a.state = 'stopped';
      await f.watcher.checkAll();
      a.state = 'serving';
      await f.watcher.checkAll();
    }
    assert.equal(f.newTaskGoesTo('a:1', 'flaky'), 'a:1');
  });

  test("a call failing UNAVAILABLE on a killed executor checks it at once: out of rotation, the call is the task's one error, the next runs elsewhere", async () => {
    const { f, a, task } = await taskOnA('killed', { failures: 3 });

    a.state = 'killed';
    await a.server.shutdown();
    // No periodic check runs from here on: the failed call alone decides.
    assert.deepEqual(await f.call(task), lost(task, 'a:1'), 'the call that met the dead executor is the one error, not a transport error');
    assert.equal(f.newTaskGoesTo('a:1', 'fresh'), 'b:1', 'the executor is out of rotation there and then');
    assert.deepEqual(await f.call(task), { output: 'ran on b:1' });
    assert.deepEqual(await f.call(task), { output: 'ran on b:1' });

    const other = f.taskOn('a:1', 'other');
    assert.deepEqual(await f.call(other), { output: 'ran on b:1' }, 'a task new to the dispatcher goes to the live executor');
  });

  test('a call failing UNAVAILABLE on an executor that still answers its health check is an error of that call only; the task stays', async () => {
    const { f, a, task } = await taskOnA('blip', { failures: 3 });

    a.dropNextCall = true;
    await assert.rejects(f.call(task), (err: Error & { code?: string }) => err.code === 'UNAVAILABLE' && /No connection established/.test(err.message));
    assert.equal(f.newTaskGoesTo('a:1', 'fresh'), 'a:1', 'still in rotation');
    assert.deepEqual(await f.call(task), { output: 'ran on a:1' }, 'the retry runs on the same executor, with no lost-environment error');
  });

  test('an executor that answers again comes back into rotation for new tasks; a task moved off it stays where it went', async () => {
    const { f, a, task } = await taskOnA('moved', { failures: 2 });
    a.state = 'stopped';
    await f.watcher.checkAll();
    await f.watcher.checkAll();
    assert.deepEqual(await f.call(task), lost(task, 'a:1'));
    assert.deepEqual(await f.call(task), { output: 'ran on b:1' });

    a.state = 'serving';
    assert.equal(f.newTaskGoesTo('a:1', 'later'), 'b:1', 'out of rotation until a check answers');
    await f.watcher.checkAll();
    assert.equal(f.newTaskGoesTo('a:1', 'later'), 'a:1', 'back after one answered check');
    const later = f.taskOn('a:1', 'later');
    assert.deepEqual(await f.call(later), { output: 'ran on a:1' });
    assert.deepEqual(await f.call(task), { output: 'ran on b:1' }, 'the moved task keeps its new environment');
  });

  test("a call in flight to an executor that stops ends as its task's one error when the executor leaves rotation; the next call runs elsewhere", async () => {
    const { f, a, task } = await taskOnA('in-flight', { failures: 2 });
    const { pending } = await callInFlight(f, a, task);

    a.state = 'stopped';
    await f.watcher.checkAll();
    assert.equal(await settled(pending), false, 'one missed check: the call still waits for its executor');
    await f.watcher.checkAll();
    assert.deepEqual(await pending, lost(task, 'a:1'), 'out of rotation: the call in flight ends as the one error');
    assert.deepEqual(await f.call(task), { output: 'ran on b:1' });
    assert.deepEqual(await f.call(task), { output: 'ran on b:1' }, 'with no second error');
  });

  test('a client leaving a call in flight is told the call was cancelled, as before; the task keeps its environment', async () => {
    const { f, a, task } = await taskOnA('leaving', { failures: 2 });
    const client = new AbortController();
    const { pending } = await callInFlight(f, a, task, client.signal);
    client.abort();
    await assert.rejects(pending, (err: unknown) => isAbortError(err));
    a.gate = undefined;
    assert.deepEqual(await f.call(task), { output: 'ran on a:1' }, 'no lost-environment error: the executor is fine');

    // A client leaving a call to an executor that has stopped: cancelled too, and the task's one error comes next.
    const again = new AbortController();
    const stranded = await callInFlight(f, a, task, again.signal);
    a.state = 'stopped';
    again.abort();
    await assert.rejects(stranded.pending, (err: unknown) => isAbortError(err));
    await rounds(f, 2);
    assert.deepEqual(await f.call(task), lost(task, 'a:1'));
    assert.deepEqual(await f.call(task), { output: 'ran on b:1' });
  });

  test('a draining executor finishes its calls in flight: out of rotation for new tasks, its call is not cut', async () => {
    const { f, a, task } = await taskOnA('draining', { failures: 2 });
    const { pending, open } = await callInFlight(f, a, task);

    a.state = 'draining';
    await rounds(f, 3);
    assert.equal(f.newTaskGoesTo('a:1', 'fresh'), 'b:1', 'out of rotation for new tasks');
    assert.equal(await settled(pending), false, 'the call in flight still runs');
    open();
    assert.deepEqual(await pending, { output: 'ran on a:1' });
  });

  test('with no other executor in rotation a call in flight to a stopped executor is not cut (often a saturated machine missing checks)', async () => {
    const f = await fleet(['a:1'], { failures: 2 });
    const a = f.by('a:1');
    const task = await f.taskStartedOn('a:1', 'alone');
    const { pending, open } = await callInFlight(f, a, task);

    a.state = 'stopped';
    await rounds(f, 3);
    assert.equal(await settled(pending), false);
    a.state = 'serving';
    open();
    assert.deepEqual(await pending, { output: 'ran on a:1' }, 'continued, the executor answers the call');
  });

  test('the executor is out of rotation before its failure is explained (the TLS probe waits on a stopped executor)', async () => {
    let explaining!: () => void;
    const explained = new Promise<void>((resolve) => (explaining = resolve));
    let finish!: (reason: string) => void;
    const explanation = new Promise<string>((resolve) => (finish = resolve));
    const { f, a, task } = await taskOnA('probe', {
      failures: 1,
      explain: () => {
        explaining();
        return explanation;
      },
    });

    a.state = 'stopped';
    const round = f.watcher.checkAll();
    await explained;
    // The explanation has not come back, and the round is still waiting for it.
    assert.equal(f.newTaskGoesTo('a:1', 'fresh'), 'b:1');
    assert.deepEqual(await f.call(task), lost(task, 'a:1'));
    assert.deepEqual(await f.call(task), { output: 'ran on b:1' });
    finish('executor a:1 is unreachable');
    await round;
  });
});
