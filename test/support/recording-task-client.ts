/**
 * Test doubles for the terminal and process_manage tools: a TaskClient that
 * records what reaches the executor and answers with canned results.
 */
import { silentLogger } from '../../services/common/logging.js';
import type {
  TaskBackgroundRequest,
  TaskClient,
  TaskExecRequest,
  TaskExecResult,
  TaskFile,
  TaskProcessRequest,
  TaskStat,
  TaskWriteResult,
} from '../../services/common/task-client.js';
import type { ToolArgs, ToolContext, ToolRegistration } from '../../services/dispatcher/registry/tool-types.js';

/**
 * A TaskClient that records every call and answers exec, startBackground and
 * process with canned results. File operations are not part of these tools,
 * so they fail loudly if reached.
 */
export class RecordingTaskClientDouble implements TaskClient {
  readonly execRequests: TaskExecRequest[] = [];
  readonly backgroundRequests: TaskBackgroundRequest[] = [];
  readonly processRequests: TaskProcessRequest[] = [];

  constructor(
    private readonly execResult: Partial<TaskExecResult> = {},
    private readonly processResult = '{"processes":[]}',
  ) {}

  exec(request: TaskExecRequest): Promise<TaskExecResult> {
    this.execRequests.push(request);
    return Promise.resolve({
      output: '',
      exitCode: 0,
      timedOut: false,
      interrupted: false,
      notices: [],
      ...this.execResult,
    });
  }

  startBackground(request: TaskBackgroundRequest): Promise<{ sessionId: string; pid: number }> {
    this.backgroundRequests.push(request);
    return Promise.resolve({ sessionId: 'proc_0123456789ab', pid: 4242 });
  }

  process(request: TaskProcessRequest): Promise<string> {
    this.processRequests.push(request);
    return Promise.resolve(this.processResult);
  }

  readFile(path: string): Promise<TaskFile> {
    return Promise.reject(new Error(`unexpected readFile(${path})`));
  }

  writeFile(path: string): Promise<TaskWriteResult> {
    return Promise.reject(new Error(`unexpected writeFile(${path})`));
  }

  stat(path: string): Promise<TaskStat> {
    return Promise.reject(new Error(`unexpected stat(${path})`));
  }

  /** True when nothing reached the executor. */
  get untouched(): boolean {
    return this.execRequests.length === 0 && this.backgroundRequests.length === 0 && this.processRequests.length === 0;
  }
}

export function contextFor(task: TaskClient, extra: Partial<ToolContext> = {}): ToolContext {
  return {
    tenant: 'tenant-a',
    taskId: 'task-1',
    sessionId: 'session-1',
    task,
    signal: new AbortController().signal,
    logger: silentLogger(),
    ...extra,
  };
}

export async function call(
  registration: ToolRegistration,
  args: ToolArgs,
  task: TaskClient,
  extra: Partial<ToolContext> = {},
): Promise<unknown> {
  const result = await registration.handler(args, contextFor(task, extra));
  return JSON.parse(result) as unknown;
}

