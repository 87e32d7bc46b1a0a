/**
 * A TaskClient that has the task admitted by the quotas before the first
 * call that could create its environment. The dispatcher admits the
 * built-in environment tools before they run (so nothing, not even an
 * approval, happens for a task over quota); this catches any other tool
 * that reaches the environment. `process` never creates an environment
 * and passes straight through.
 */
import type {
  TaskBackgroundRequest,
  TaskClient,
  TaskCodeRunRequest,
  TaskCodeRunResult,
  TaskExecRequest,
  TaskExecResult,
  TaskFile,
  TaskMcpRequest,
  TaskMcpResult,
  TaskProcessRequest,
  TaskStat,
  TaskWriteResult,
} from '../../common/task-client.js';

export class AdmittingTaskClient implements TaskClient {
  readonly #inner: TaskClient;
  readonly #admit: () => Promise<unknown>;
  readonly runCode?: (request: TaskCodeRunRequest) => Promise<TaskCodeRunResult>;
  readonly mcpRequest?: (request: TaskMcpRequest) => Promise<TaskMcpResult>;

  /** `admit` resolves once the task may have an environment (called once per call; it memoises). */
  constructor(inner: TaskClient, admit: () => Promise<unknown>) {
    this.#inner = inner;
    this.#admit = admit;
    const runCode = inner.runCode?.bind(inner);
    if (runCode) {
      this.runCode = async (request) => {
        await this.#admit();
        return runCode(request);
      };
    }
    const mcpRequest = inner.mcpRequest?.bind(inner);
    if (mcpRequest) {
      // A stdio server runs in the task's environment (an HTTP one needs it for its connection state).
      this.mcpRequest = async (request) => {
        await this.#admit();
        return mcpRequest(request);
      };
    }
  }

  async exec(request: TaskExecRequest): Promise<TaskExecResult> {
    await this.#admit();
    return this.#inner.exec(request);
  }

  async readFile(path: string): Promise<TaskFile> {
    await this.#admit();
    return this.#inner.readFile(path);
  }

  async writeFile(path: string, content: string | Uint8Array): Promise<TaskWriteResult> {
    await this.#admit();
    return this.#inner.writeFile(path, content);
  }

  async stat(path: string): Promise<TaskStat> {
    await this.#admit();
    return this.#inner.stat(path);
  }

  async startBackground(request: TaskBackgroundRequest): Promise<{ sessionId: string; pid: number }> {
    await this.#admit();
    return this.#inner.startBackground(request);
  }

  process(request: TaskProcessRequest): Promise<string> {
    return this.#inner.process(request);
  }
}
