/**
 * The `process_manage` tool (old name `process`, still accepted): manages background processes the `terminal` tool
 * started. The dispatcher only validates the call and converts units; the
 * executor's process registry does the work and writes the result JSON.
 */
import { requestApproval } from '../approval/guard-hook.js';
import type { TaskProcessRequest } from '../../common/task-client.js';
import type { ToolArgs, ToolContext, ToolRegistration, ToolSchema } from '../tool-types.js';

/** Actions in the order the protocol lists them (the unknown-action error repeats this list). */
export const PROCESS_ACTIONS = ['list', 'poll', 'log', 'wait', 'kill', 'write', 'submit', 'close'] as const;

export type ProcessAction = (typeof PROCESS_ACTIONS)[number];

const ACTION_SET: ReadonlySet<string> = new Set(PROCESS_ACTIONS);

/** Actions that send `data` to the process's stdin. */
const INPUT_ACTIONS: ReadonlySet<string> = new Set<ProcessAction>(['write', 'submit']);

const SCHEMA: ToolSchema = {
  name: 'process_manage',
  description:
    'Manage background processes started with terminal(background=true). ' +
    'list: all processes of this task with status. poll: status and new output since the last poll. ' +
    'log: the buffered output, paged with offset and limit. wait: block until the process exits or timeout ' +
    'seconds pass. kill: terminate it. write: send data to its stdin as is. submit: send data followed by ' +
    'Enter. close: close its stdin (end of input). Every action except list needs session_id.',
  parameters: {
    type: 'object',
    properties: {
      action: {
        type: 'string',
        enum: [...PROCESS_ACTIONS],
        description: 'What to do: list, poll, log, wait, kill, write, submit or close.',
      },
      session_id: {
        type: 'string',
        description: 'The process to act on, as returned by terminal(background=true) (proc_...). Not needed for list.',
      },
      data: {
        type: 'string',
        description: 'For write and submit: the text to send to the process stdin (submit adds the newline).',
      },
      timeout: {
        type: 'integer',
        minimum: 0,
        description: 'For wait: the most seconds to wait before returning with the process still running.',
      },
      offset: {
        type: 'integer',
        description: 'For log: the first line to return, counting from 0; omit to get the most recent lines.',
      },
      limit: {
        type: 'integer',
        minimum: 1,
        description: 'For log: how many lines to return.',
      },
    },
    required: ['action'],
  },
};

function errorResult(error: string): string {
  return JSON.stringify({ error });
}

function describeValue(value: unknown): string {
  if (value === undefined || value === null) return '';
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function readInteger(raw: unknown, name: string): number | string | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (typeof raw !== 'number' || !Number.isFinite(raw)) return `${name} must be a number, got ${describeValue(raw)}`;
  return Math.trunc(raw);
}

async function runProcess(args: ToolArgs, ctx: ToolContext): Promise<string> {
  const action = args.action;
  if (typeof action !== 'string' || !ACTION_SET.has(action)) {
    return errorResult(
      `Unknown process action: ${describeValue(action)}. Use: ${PROCESS_ACTIONS.join(', ')}`,
    );
  }

  const sessionId = typeof args.session_id === 'string' && args.session_id !== '' ? args.session_id : undefined;
  if (action !== 'list' && sessionId === undefined) return errorResult(`session_id is required for ${action}`);

  const data = args.data;
  // An empty string is valid: `submit` with "" just presses Enter.
  if (INPUT_ACTIONS.has(action) && typeof data !== 'string') return errorResult(`data is required for ${action}`);

  let timeoutMs: number | undefined;
  if (args.timeout !== undefined && args.timeout !== null) {
    if (typeof args.timeout !== 'number' || !Number.isFinite(args.timeout) || args.timeout < 0) {
      return errorResult(`timeout must be a non-negative number of seconds, got ${describeValue(args.timeout)}`);
    }
    timeoutMs = Math.round(args.timeout * 1000);
  }
  const offset = readInteger(args.offset, 'offset');
  if (typeof offset === 'string') return errorResult(offset);
  const limit = readInteger(args.limit, 'limit');
  if (typeof limit === 'string') return errorResult(limit);

  // Input to a background process may be a shell's next command line: it needs the same approval as terminal.
  if (typeof data === 'string' && INPUT_ACTIONS.has(action) && data.trim() !== '') {
    const verdict = await requestApproval(ctx, { tool: 'process_manage', command: data });
    if (!verdict.allowed) return verdict.result;
  }

  const request: TaskProcessRequest = {
    action,
    ...(sessionId === undefined ? {} : { sessionId }),
    ...(typeof data === 'string' && INPUT_ACTIONS.has(action) ? { data } : {}),
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
    ...(offset === undefined ? {} : { offset }),
    ...(limit === undefined ? {} : { limit }),
  };
  return ctx.task.process(request);
}

/** The `process_manage` tool registration (toolset `terminal`). */
export function processToolRegistration(): ToolRegistration {
  return {
    name: 'process_manage',
    toolset: 'terminal',
    schema: SCHEMA,
    handler: runProcess,
    emoji: '⚙️',
  };
}
