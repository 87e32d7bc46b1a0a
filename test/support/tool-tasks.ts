/**
 * Tool tests over real task environments: the task client and tool context
 * a tool gets from the dispatcher, without the dispatcher, and a local
 * backend whose tasks are released after each test.
 */
import { mkdtemp, realpath, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, before } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskClient } from '../../services/common/task-client.js';
import type { ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { LocalBackend } from '../../services/executor/backends/local/local-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';

/** The task client the dispatcher hands a tool, calling the executor's environments in process. */
export function taskClientOf(envs: TaskEnvironments, key: TaskKey): TaskClient {
  return {
    exec: (request) => envs.exec(key, request),
    readFile: (p) => envs.readFile(key, p),
    writeFile: (p, content) => envs.writeFile(key, p, content),
    stat: (p) => envs.stat(key, p),
    startBackground: (request) => envs.startBackground(key, request),
    process: (request) => envs.process(key, request),
  };
}

/** A tool context for one task, session `session`, never aborted. */
export function toolContextOf(key: TaskKey, client: TaskClient): ToolContext {
  return {
    tenant: key.tenant,
    taskId: key.taskId,
    sessionId: 'session',
    task: client,
    signal: new AbortController().signal,
    logger: silentLogger(),
  };
}

export interface LocalToolTasks {
  /** The test's temporary directory (real path); the tasks start in it unless `prepare` says otherwise. */
  readonly root: string;
  readonly envs: TaskEnvironments;
  readonly backend: LocalBackend;
  /** A new task of tenant `tenant`, released after the current test. */
  newTask(): { readonly key: TaskKey; readonly context: ToolContext };
}

/**
 * Registers the test file's hooks for a local backend in a temporary
 * directory: made before the tests (`prepare` may fill it and name the
 * tasks' first cwd), tasks released after each test, everything removed at
 * the end. Call at the top level of a test file.
 */
export function localToolTasks(
  name: string,
  prepare?: (root: string) => Promise<{ readonly initialCwd?: string } | void>,
): LocalToolTasks {
  let root: string | undefined;
  let backend: LocalBackend | undefined;
  let envs: TaskEnvironments | undefined;
  let taskNo = 0;
  const keys: TaskKey[] = [];
  const need = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('localToolTasks: used before its before() hook ran');
    return value;
  };

  before(async () => {
    root = await realpath(await mkdtemp(path.join(os.tmpdir(), `berth-${name}-`)));
    const prepared = (await prepare?.(root)) ?? {};
    backend = new LocalBackend({ stateRoot: path.join(root, 'state'), initialCwd: prepared.initialCwd ?? root });
    envs = new TaskEnvironments({ backend, logger: silentLogger() });
  });
  afterEach(async () => {
    for (const key of keys.splice(0)) await envs?.release(key);
  });
  after(async () => {
    await envs?.closeAll();
    await backend?.close();
    if (root !== undefined) await rm(root, { recursive: true, force: true });
  });

  return {
    get root() {
      return need(root);
    },
    get envs() {
      return need(envs);
    },
    get backend() {
      return need(backend);
    },
    newTask() {
      const key: TaskKey = { tenant: 'tenant', taskId: `${name}-task-${++taskNo}` };
      keys.push(key);
      return { key, context: toolContextOf(key, taskClientOf(need(envs), key)) };
    },
  };
}
