/**
 * Interrupts at every stage of a call (issue: "an interrupt is never lost"),
 * on any backend: a real backend, the real executor service (reached through
 * the in-process client, as `berth serve` reaches it) and the real
 * dispatcher with the built-in terminal and execute_code tools. A call is
 * held at one stage by a hold point in front of the real part — the
 * backend's environment creation, the relay's start, a code container's
 * start, a quota usage report, or (given by the backend's test file) the
 * replacement of a lost sandbox — never by timing. Each case checks that:
 *
 * - the interrupted call answers while its stage is still held (so the
 *   answer does not wait for the stage), with the tool's interrupted result;
 * - once the hold is released, what the call would have started never runs
 *   (a marker its command would write is absent when a later call looks).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { parseConfig } from '../../services/common/config-load.js';
import { NO_CONTAINERS } from '../../services/common/container-limits.js';
import { errorBoundary } from '../../services/common/grpc-errors.js';
import { createInProcessClient } from '../../services/common/in-process-client.js';
import { silentLogger } from '../../services/common/logging.js';
import { Dispatcher } from '../../services/dispatcher/dispatcher.js';
import { ExecutorRouter } from '../../services/dispatcher/executors/executor-router.js';
import { QuotaLedger, type ExecutorUsageReport } from '../../services/dispatcher/quotas/quota-ledger.js';
import { ToolRegistry } from '../../services/dispatcher/registry/registry.js';
import { registerBuiltinTools } from '../../services/dispatcher/tools/builtin-tools.js';
import type {
  Backend,
  BackendEnvironment,
  CodeRunnerEnvironment,
  CodeRunnerEnvironments,
  RpcRelay,
  TaskKey,
} from '../../services/executor/backend.js';
import { CodeRunner } from '../../services/executor/code-execution/code-runner.js';
import { createExecutorService } from '../../services/executor/executor-service.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { ExecutorDefinition, type ExecutorClient } from '../../services/gen/berth/v1/executor.js';
import type { BackendName } from '../../services/common/config.js';

/** A point a call passes; once armed, the next call to pass waits there until released. */
export class HoldPoint {
  #armed: { reached: () => void; released: Promise<void> } | undefined;

  /** Arms the point: `reached` resolves when a call arrives; `release` lets it (and later ones) go on. */
  arm(): { reached: Promise<void>; release: () => void } {
    let reached!: () => void;
    const arrived = new Promise<void>((resolve) => (reached = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    this.#armed = { reached, released };
    return {
      reached: arrived,
      release: () => {
        this.#armed = undefined;
        release();
      },
    };
  }

  async pass(): Promise<void> {
    const armed = this.#armed;
    if (!armed) return;
    armed.reached();
    await armed.released;
  }
}

export interface Holds {
  readonly create: HoldPoint;
  readonly relay: HoldPoint;
  readonly codeContainer: HoldPoint;
}

/** The environment with its relay's start behind `hold` (everything else is the real environment's). */
function heldEnvironment(env: BackendEnvironment, hold: HoldPoint): BackendEnvironment {
  const relay = env.rpcRelay;
  const heldRelay: RpcRelay | undefined = relay && {
    sandboxDir: relay.sandboxDir,
    listen: async (socketPath, onConnection) => {
      await hold.pass();
      return relay.listen(socketPath, onConnection);
    },
  };
  return new Proxy(env, {
    get(target, prop) {
      if (prop === 'rpcRelay') return heldRelay;
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** A real backend whose environment creation (and each environment's relay start) passes hold points first. */
export class HeldBackend implements Backend {
  readonly #inner: Backend;
  readonly #holds: Holds;

  constructor(inner: Backend, holds: Holds) {
    this.#inner = inner;
    this.#holds = holds;
  }

  get capabilities() {
    return this.#inner.capabilities;
  }

  async createEnvironment(key: TaskKey): Promise<BackendEnvironment> {
    await this.#holds.create.pass();
    return heldEnvironment(await this.#inner.createEnvironment(key), this.#holds.relay);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}

/** Real code containers whose start passes a hold point first. */
function heldCodeContainers(inner: CodeRunnerEnvironments, hold: HoldPoint): CodeRunnerEnvironments {
  return {
    async create(key: TaskKey): Promise<CodeRunnerEnvironment> {
      await hold.pass();
      return inner.create(key);
    },
    close: () => inner.close(),
  };
}

/** An executor's usage reports (quota admission) that wait at a hold point, as a slow executor's would. */
function heldUsage(client: ExecutorClient, hold: HoldPoint) {
  return {
    async fetch(): Promise<ExecutorUsageReport> {
      await hold.pass();
      const r = await client.taskUsage({});
      return {
        tasks: r.tasks.map((t) => ({ tenant: t.task?.tenant ?? '', taskId: t.task?.taskId ?? '', held: NO_CONTAINERS })),
        perTask: NO_CONTAINERS,
        perCodeContainer: NO_CONTAINERS,
      };
    },
    healthy: () => true,
  };
}

export interface InterruptStagesOptions {
  /** The backend's name in config (the execute_code tool and router read it). */
  readonly backend: BackendName;
  /** Code containers for a backend whose environments run no script themselves (the real ones, started by the file). */
  readonly codeContainers?: () => Promise<CodeRunnerEnvironments>;
  /** The environment has an rpcRelay: the relay's start is a stage. */
  readonly relay?: boolean;
  /**
   * Makes the task's sandbox lost and holds its replacement: `lose` ends the
   * sandbox under its environment the way a user meets it (a container
   * killed, a cloud sandbox terminated or deleted, a pod deleted); the
   * returned hold is armed so the replacement waits (e.g. a Docker socket,
   * the backend's or its stand-in's, that holds container creation).
   * Absent: the backend never replaces its sandboxes.
   */
  readonly replacement?: {
    lose(env: BackendEnvironment, task: TaskKey): Promise<void>;
    holdReplacement(): { reached: Promise<void>; release: () => void };
  };
  /** Scale for the test timeouts on slow backends; default 1. */
  readonly timeScale?: number;
  /** Tenant of the tasks (for cleanup by label); default a fresh one. */
  readonly tenant?: string;
}

interface TerminalJson {
  output: string;
  exit_code: number;
  environment_recreated?: string;
}

interface CodeJson {
  status: string;
  output: string;
  error?: string;
}

export const INTERRUPTED_SCRIPT_OUTPUT = '\n[execution interrupted — user sent a new message]';

/** Registers the stage cases for one backend (`makeBackend` runs once, in `before`). */
export function runInterruptStages(name: string, makeBackend: () => Promise<Backend>, options: InterruptStagesOptions): void {
  const timeout = 120_000 * (options.timeScale ?? 1);
  const run = randomBytes(4).toString('hex');
  const tenant = options.tenant ?? `intr-${run}`;
  const holds: Holds = { create: new HoldPoint(), relay: new HoldPoint(), codeContainer: new HoldPoint() };
  const usageHold = new HoldPoint();
  // The tools' own settings (the backend's connection settings are the test file's, not config's).
  const config = parseConfig({ code_execution: { timeout: 300 } });
  const logger = silentLogger();
  let backend: Backend | undefined;
  let envs: TaskEnvironments;
  let codeContainers: CodeRunnerEnvironments | undefined;
  let client: ExecutorClient;
  const shutdown = new AbortController();
  let dispatcher: Dispatcher;
  let admitting: Dispatcher;
  let taskNo = 0;
  const newTask = () => `t${++taskNo}`;
  const marker = (label: string) => `berth-intr-${label}-${run}-${taskNo}`;

  const call = (d: Dispatcher, tool: string, args: Record<string, unknown>, taskId: string, signal = new AbortController().signal) =>
    d.callTool(tenant, { name: tool, argumentsJson: JSON.stringify(args), taskId, sessionId: '' }, { signal });
  const terminal = async (taskId: string, command: string, d = dispatcher) =>
    JSON.parse(await call(d, 'terminal', { command }, taskId)) as TerminalJson;
  /** Whether the file exists in the task's environment (relative to its cwd), asked by a later call (its whole answer). */
  const look = (taskId: string, file: string) => terminal(taskId, `test -e ${file} && echo present || echo absent`);
  const present = async (taskId: string, file: string) => (await look(taskId, file)).output;
  /** A script that would leave `file` in the task's environment through its terminal tool. */
  const touchingScript = (file: string) => `from hermes_tools import terminal\nterminal("touch ${file}")\nprint("ran")`;

  describe(`interrupts at every stage: ${name}`, () => {
    before(async () => {
      backend = await makeBackend();
      codeContainers = options.codeContainers && heldCodeContainers(await options.codeContainers(), holds.codeContainer);
      envs = new TaskEnvironments({ backend: new HeldBackend(backend, holds), logger, lifetimeSeconds: 0 });
      const runner = new CodeRunner(envs, { logger, killGraceMs: 1000, ...(codeContainers ? { codeContainers } : {}) });
      const service = createExecutorService(envs, { executorId: 'intr' }, shutdown.signal, runner);
      client = createInProcessClient(ExecutorDefinition, service, { middleware: errorBoundary(logger, shutdown.signal) });
      const router = new ExecutorRouter([{ id: 'intr', backend: options.backend, client, healthy: true }], () => ({ backend: options.backend }));
      const registry = new ToolRegistry({ logger });
      registerBuiltinTools(registry, config, { env: {} });
      dispatcher = new Dispatcher({ registry, router, terminal: config.terminal, logger });
      const quotas = new QuotaLedger({
        quotasFor: () => ({ max_tasks: 1000 }),
        usage: heldUsage(client, usageHold),
        fallbackCosts: () => ({ perTask: NO_CONTAINERS, perCodeContainer: NO_CONTAINERS }),
      });
      admitting = new Dispatcher({ registry, router, terminal: config.terminal, logger, quotas });
    });

    after(async () => {
      shutdown.abort();
      await envs?.closeAll();
      await codeContainers?.close();
      await backend?.close();
    });

    /**
     * Holds a call at `hold`, interrupts the task there, and checks the
     * answer came while the stage was still held and that the call's
     * command never ran once the stage went on.
     */
    async function interruptAt(
      hold: { reached: Promise<void>; release: () => void },
      taskId: string,
      tool: 'terminal' | 'execute_code',
      file: string,
      d = dispatcher,
      afterwards: (check: TerminalJson) => void = () => undefined,
    ): Promise<string> {
      const args = tool === 'terminal' ? { command: `touch ${file}` } : { code: touchingScript(file) };
      const pending = call(d, tool, args, taskId);
      let answer: string;
      try {
        await hold.reached;
        const interrupted = await d.interrupt(tenant, taskId);
        assert.ok(interrupted >= 1, `the held call counts as interrupted (${interrupted})`);
        // Answered while the stage is still held: the interrupt does not wait for it.
        answer = await pending;
      } finally {
        hold.release();
      }
      const check = await look(taskId, file);
      assert.equal(check.output.split('\n')[0], 'absent', `the interrupted ${tool} call ran after all`);
      afterwards(check);
      return answer;
    }

    const assertTerminalInterrupted = (answer: string) => {
      const r = JSON.parse(answer) as TerminalJson;
      assert.deepEqual([r.output, r.exit_code], ['[Command interrupted]', 130], answer);
    };
    const assertScriptInterrupted = (answer: string, printed = '') => {
      const r = JSON.parse(answer) as CodeJson;
      assert.deepEqual([r.status, r.output], ['interrupted', printed + INTERRUPTED_SCRIPT_OUTPUT], answer);
    };

    /**
     * The replacement the interrupted call waited for went on for the task:
     * the next call (interruptAt's check) ran in the new sandbox and was
     * told the environment was recreated.
     */
    const assertRecreated = (check: TerminalJson) =>
      assert.ok(check.environment_recreated, `the next call was not told of the new sandbox: ${JSON.stringify(check)}`);

    it('waiting for quota admission (a slow usage report): terminal and execute_code', { timeout }, async () => {
      // The first admission on an executor asks it for its costs: held there.
      const first = newTask();
      assertTerminalInterrupted(await interruptAt(usageHold.arm(), first, 'terminal', marker('admit'), admitting));
      // A refused task asks every executor again before saying no; held there for execute_code.
      const second = newTask();
      const quotas = new QuotaLedger({
        quotasFor: () => ({ max_tasks: 0 }),
        usage: heldUsage(client, usageHold),
        fallbackCosts: () => ({ perTask: NO_CONTAINERS, perCodeContainer: NO_CONTAINERS }),
      });
      await quotas.refresh('intr');
      const refusing = new Dispatcher({
        registry: admitting.registry,
        router: new ExecutorRouter([{ id: 'intr', backend: options.backend, client, healthy: true }], () => ({ backend: options.backend })),
        terminal: config.terminal,
        logger,
        quotas,
      });
      const hold = usageHold.arm();
      const pending = call(refusing, 'execute_code', { code: touchingScript(marker('admit-code')) }, second);
      await hold.reached;
      await refusing.interrupt(tenant, second);
      const answer = await pending;
      hold.release();
      assertScriptInterrupted(answer);
    });

    it('while the task environment is created: terminal', { timeout }, async () => {
      const taskId = newTask();
      assertTerminalInterrupted(await interruptAt(holds.create.arm(), taskId, 'terminal', marker('create')));
    });

    it('while the task environment is created: execute_code', { timeout }, async () => {
      const taskId = newTask();
      assertScriptInterrupted(await interruptAt(holds.create.arm(), taskId, 'execute_code', marker('create-code')));
    });

    it('a client that cancels while the environment is created: nothing runs afterwards', { timeout }, async () => {
      const taskId = newTask();
      const file = marker('cancel');
      const hold = holds.create.arm();
      const client = new AbortController();
      const pending = call(dispatcher, 'terminal', { command: `touch ${file}` }, taskId, client.signal);
      try {
        await hold.reached;
        client.abort();
        await assert.rejects(pending);
      } finally {
        hold.release();
      }
      assert.equal(await present(taskId, file), 'absent');
    });

    if (options.relay) {
      it("while execute_code's relay starts", { timeout }, async () => {
        const taskId = newTask();
        await terminal(taskId, 'true');
        assertScriptInterrupted(await interruptAt(holds.relay.arm(), taskId, 'execute_code', marker('relay')));
      });
    }

    if (options.codeContainers) {
      it("while execute_code's code container starts", { timeout }, async () => {
        const taskId = newTask();
        await terminal(taskId, 'true');
        assertScriptInterrupted(await interruptAt(holds.codeContainer.arm(), taskId, 'execute_code', marker('code-ctr')));
      });
    }

    const replacement = options.replacement;
    if (replacement) {
      /** A task whose sandbox was lost, with the replacement's hold armed (the next call that needs the sandbox waits there). */
      const lostTask = async () => {
        const taskId = newTask();
        await terminal(taskId, 'true');
        const env = await environmentOf(taskId);
        const hold = replacement.holdReplacement();
        await replacement.lose(env, { tenant, taskId });
        return { taskId, hold };
      };

      it('while the task environment is replaced (its sandbox was lost): terminal', { timeout }, async () => {
        const { taskId, hold } = await lostTask();
        assertTerminalInterrupted(await interruptAt(hold, taskId, 'terminal', marker('replace'), dispatcher, assertRecreated));
      });

      it('while the task environment is replaced (its sandbox was lost): execute_code', { timeout }, async () => {
        const { taskId, hold } = await lostTask();
        assertScriptInterrupted(await interruptAt(hold, taskId, 'execute_code', marker('replace-code'), dispatcher, assertRecreated));
      });
    }

    it('while the command runs: output printed before the interrupt is kept (terminal)', { timeout }, async () => {
      const taskId = newTask();
      const outputs: string[] = [];
      const pending = dispatcher.callTool(
        tenant,
        { name: 'terminal', argumentsJson: JSON.stringify({ command: 'echo started; sleep 300; echo finished' }), taskId, sessionId: '' },
        { signal: new AbortController().signal, onOutput: (text) => outputs.push(text) },
      );
      await until('the command to print', () => outputs.join('').includes('started'));
      assert.ok((await dispatcher.interrupt(tenant, taskId)) >= 1);
      // Answered long before the command would have finished (its sleep).
      const r = JSON.parse(await pending) as TerminalJson;
      assert.deepEqual([r.output, r.exit_code], ['started\n\n[Command interrupted]', 130]);
    });

    it('while the command runs: output printed before the interrupt is kept (execute_code)', { timeout }, async () => {
      const taskId = newTask();
      const file = marker('printed');
      const code = `import time\nfrom hermes_tools import terminal\nprint("started", flush=True)\nterminal("touch ${file}")\ntime.sleep(300)\nprint("finished")`;
      const pending = call(dispatcher, 'execute_code', { code }, taskId);
      let early: string | undefined;
      void pending.then((answer) => (early = answer));
      await until('the script to print', async () => {
        if (early !== undefined) throw new Error(`the script ended before it was interrupted: ${early}`);
        return (await present(taskId, file)) === 'present';
      });
      assert.ok((await dispatcher.interrupt(tenant, taskId)) >= 1);
      assertScriptInterrupted(await pending, 'started\n');
    });

    /** The task's backend environment (the held one's target), for `lose`. */
    async function environmentOf(taskId: string): Promise<BackendEnvironment> {
      const found: BackendEnvironment[] = [];
      await envs.withForeground({ tenant, taskId }, async (task) => void found.push(task.env));
      const env = found[0];
      if (!env) throw new Error(`no environment for ${taskId}`);
      return env;
    }
  });
}

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
