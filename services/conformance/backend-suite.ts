/**
 * One run of the backend conformance suite: the backend under test, driven
 * through {@link TaskEnvironments} exactly as the executor drives it, and
 * what every case uses of it (fresh tasks, commands, `process` actions,
 * waits for output and for processes to be gone). Tasks a case made are
 * released after it; the backend is closed after the last case.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, afterEach, before } from 'node:test';
import type { TaskExecResult } from '../common/task-client.js';
import { silentLogger } from '../common/logging.js';
import type { Backend, BackendCapabilities, BackendEnvironment, TaskKey } from '../executor/backend.js';
import { taskKeyString } from '../executor/backend.js';
import { TaskEnvironments } from '../executor/task-environment.js';
import { countProcessesScript } from './process-probe.js';

/** A `process` tool result, as far as the cases read it. */
export interface ProcessJson {
  readonly status?: string;
  readonly exit_code?: number | null;
  readonly output?: string;
  readonly output_preview?: string;
  readonly completion_reason?: string;
  readonly termination_source?: string;
  readonly pid?: number;
  readonly processes?: readonly { readonly session_id: string }[];
  readonly error?: string;
}

export interface BackendSuiteSettings {
  /** Multiplies every wait and limit. */
  readonly scale: number;
  /** Tenant of the tasks the suite creates. */
  readonly tenant: string;
}

export interface BackendSuite {
  /** The backend's name in test titles and messages. */
  readonly name: string;
  /** Tells this run's tasks and files from another's. */
  readonly runId: string;
  readonly tenant: string;
  /** Multiplies every wait and limit, for slow backends. */
  readonly scale: number;
  /** The timeout of one case. */
  readonly testTimeoutMs: number;
  /** The task environments the cases drive (made before the first case). */
  readonly envs: TaskEnvironments;
  readonly capabilities: BackendCapabilities;
  /** The backend environment behind a task, for checks from outside after release. */
  environment(key: TaskKey): BackendEnvironment | undefined;
  /** A task of its own for a case, released after it. */
  newTask(): TaskKey;
  exec(key: TaskKey, command: string, extra?: { timeoutMs?: number; stdin?: string; pty?: boolean }): Promise<TaskExecResult>;
  processAction(key: TaskKey, action: string, sessionId?: string, extra?: object): Promise<ProcessJson>;
  /** Waits until no live process in the task's environment has an argument equal to `arg`. */
  assertNoProcess(key: TaskKey, arg: string, what: string): Promise<void>;
  /** Polls a background process until its output shows `needle`; returns that output. */
  untilOutput(key: TaskKey, sessionId: string, needle: string): Promise<string>;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Registers the hooks of one run (inside its `describe`): `makeBackend` runs
 * once before the cases, and the suite closes the backend afterwards.
 */
export function backendSuite(name: string, makeBackend: () => Promise<Backend>, settings: BackendSuiteSettings): BackendSuite {
  const { scale, tenant } = settings;
  const runId = randomBytes(4).toString('hex');
  let inner: Backend;
  let envs: TaskEnvironments;
  /** The backend environment behind each task, for checks from outside after release. */
  const environments = new Map<string, BackendEnvironment>();
  const used: TaskKey[] = [];
  let taskNo = 0;

  before(async () => {
    inner = await makeBackend();
    // Wrapped so the suite can see which environment each task got.
    const recording: Backend = {
      get capabilities() {
        return inner.capabilities;
      },
      createEnvironment: async (key) => {
        const env = await inner.createEnvironment(key);
        environments.set(taskKeyString(key), env);
        return env;
      },
      close: () => inner.close(),
    };
    envs = new TaskEnvironments({ backend: recording, logger: silentLogger(), lifetimeSeconds: 0 });
  });

  afterEach(async () => {
    await Promise.all(used.splice(0).map((key) => envs.release(key)));
  });

  after(async () => {
    await envs?.closeAll();
    await inner?.close();
  });

  const exec: BackendSuite['exec'] = (key, command, extra = {}) =>
    envs.exec(key, { command, timeoutMs: extra.timeoutMs ?? 30_000 * scale, ...extra, maxOutputChars: 2_000_000 });

  const processAction: BackendSuite['processAction'] = async (key, action, sessionId, extra = {}) =>
    JSON.parse(
      await envs.process(key, { action, ...(sessionId !== undefined ? { sessionId } : {}), ...extra }),
    ) as ProcessJson;

  return {
    name,
    runId,
    tenant,
    scale,
    testTimeoutMs: 60_000 * scale,
    get envs() {
      return envs;
    },
    get capabilities() {
      return inner.capabilities;
    },
    environment: (key) => environments.get(taskKeyString(key)),
    newTask: () => {
      const key = { tenant, taskId: `${name}-${runId}-${++taskNo}` };
      used.push(key);
      return key;
    },
    exec,
    processAction,
    assertNoProcess: async (key, arg, what) => {
      const deadline = Date.now() + 10_000 * scale;
      let last = '';
      for (;;) {
        const r = await exec(key, countProcessesScript(arg));
        last = r.output.trim();
        if (last === 'count=0') return;
        if (Date.now() > deadline) break;
        await sleep(200);
      }
      assert.fail(`${what}: processes with argument "${arg}" still run in ${name} (${last})`);
    },
    untilOutput: async (key, sessionId, needle) => {
      const deadline = Date.now() + 15_000 * scale;
      let seen = '';
      while (!seen.includes(needle)) {
        if (Date.now() > deadline) assert.fail(`background output never showed "${needle}"; got ${JSON.stringify(seen)}`);
        // poll reads nothing away: each answer shows the buffer's last 1,000 characters.
        const p = await processAction(key, 'poll', sessionId);
        seen = p.output_preview ?? '';
        if (!seen.includes(needle)) await sleep(100);
      }
      return seen;
    },
  };
}
