/**
 * The `process_manage` tool (old name `process`, still accepted): manages background processes the `terminal` tool
 * started. The dispatcher only validates the call and converts units; the
 * executor's process registry does the work and writes the result JSON.
 */
import { requestApproval } from '../approval/flow/guard-hook.js';
import {
  HANDOFF_UNAVAILABLE_ERROR,
  PROCESS_ACTIONS,
  nonPositiveTimeoutError,
  unknownProcessActionError,
  type ProcessAction,
} from '../../common/process-actions.js';
import type { TaskProcessRequest } from '../../common/task-client.js';
import { redactProcessResult } from '../redaction/output-redaction.js';
import type { ToolArgs, ToolContext, ToolRegistration, ToolSchema } from '../registry/tool-types.js';

/** Largest `timeout_ms` the executor request carries (uint32); longer waits are clamped there anyway. */
const MAX_TIMEOUT_MS = 0xffff_ffff;

const ACTION_SET: ReadonlySet<string> = new Set(PROCESS_ACTIONS);

/** Actions that send `data` to the process's stdin. */
const INPUT_ACTIONS: ReadonlySet<string> = new Set<ProcessAction>(['write', 'submit']);

const SCHEMA: ToolSchema = {
  name: 'process_manage',
  description:
    'Manage background processes started with terminal(background=true). ' +
    'list: all processes of this task with status. poll: status and output_preview (the last 1,000 ' +
    'characters of output). log: the buffered output, paged with offset and limit. wait: block until the ' +
    'process exits or timeout seconds pass (partial output on timeout). kill: terminate it. write: send data ' +
    'to its stdin as is. submit: send data followed by Enter (to answer a prompt). close: end of input. Only ' +
    'processes started with pty=true take input; others start with stdin at end of input. ' +
    'handoff: subagents only. Every action except list needs session_id; any unique prefix of it works.',
  parameters: {
    type: 'object',
    properties: {
      action: {
        type: 'string',
        enum: [...PROCESS_ACTIONS],
        description: 'What to do: list, poll, log, wait, kill, write, submit, close or handoff (subagents only).',
      },
      session_id: {
        type: 'string',
        description:
          'The process to act on, as returned by terminal(background=true); any unique prefix works ' +
          "('4dae' for proc_4dae56ca81f6). Not needed for list.",
      },
      data: {
        type: 'string',
        description:
          'For write and submit: the text to send to the process stdin (submit adds the newline). ' +
          'For handoff: one sentence on what the process is for.',
      },
      timeout: {
        type: 'integer',
        minimum: 1,
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

/** Some models send a session id as a number; upstream takes its text. */
function readSessionId(raw: unknown): string | undefined {
  if (typeof raw === 'number' && Number.isFinite(raw)) return String(raw);
  return typeof raw === 'string' && raw !== '' ? raw : undefined;
}

/** Stdin text for write/submit: missing means empty (submit then just presses Enter). */
function readData(raw: unknown): string {
  if (raw === undefined || raw === null) return '';
  return typeof raw === 'string' ? raw : JSON.stringify(raw);
}

async function runProcess(args: ToolArgs, ctx: ToolContext, redact: boolean): Promise<string> {
  const action = args.action;
  if (typeof action !== 'string' || !ACTION_SET.has(action)) {
    return errorResult(unknownProcessActionError(describeValue(action)));
  }

  const sessionId = readSessionId(args.session_id);
  if (action !== 'list' && sessionId === undefined) return errorResult(`session_id is required for ${action}`);
  // Handing a process to a parent agent needs a subagent; Berth runs none, so no executor round trip.
  if (action === 'handoff') return errorResult(HANDOFF_UNAVAILABLE_ERROR);

  const data = INPUT_ACTIONS.has(action) ? readData(args.data) : undefined;

  // Only wait reads timeout (seconds); other actions ignore it, as upstream does.
  let timeoutMs: number | undefined;
  if (action === 'wait' && args.timeout !== undefined && args.timeout !== null) {
    if (typeof args.timeout !== 'number' || !Number.isFinite(args.timeout)) {
      return errorResult(`timeout must be a number of seconds, got ${describeValue(args.timeout)}`);
    }
    if (args.timeout <= 0) return JSON.stringify({ status: 'error', error: nonPositiveTimeoutError(args.timeout) });
    // At least 1 ms: 0 on the wire means "no timeout given".
    timeoutMs = Math.min(MAX_TIMEOUT_MS, Math.max(1, Math.round(args.timeout * 1000)));
  }
  const offset = readInteger(args.offset, 'offset');
  if (typeof offset === 'string') return errorResult(offset);
  const limit = readInteger(args.limit, 'limit');
  if (typeof limit === 'string') return errorResult(limit);

  // Input to a background process may be a shell's next command line: it needs the same approval as terminal.
  if (data !== undefined && data.trim() !== '') {
    const verdict = await requestApproval(ctx, { tool: 'process_manage', command: data });
    if (!verdict.allowed) return verdict.result;
  }

  const request: TaskProcessRequest = {
    action,
    ...(sessionId === undefined ? {} : { sessionId }),
    ...(data === undefined ? {} : { data }),
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
    ...(offset === undefined ? {} : { offset }),
    ...(limit === undefined ? {} : { limit }),
  };
  const result = await ctx.task.process(request);
  // Upstream redacts output, output_preview and command of poll/log/wait/kill and list.
  return redact ? redactProcessResult(action, result) : result;
}

export interface ProcessToolOptions {
  /** Mask secrets in process output and commands (`security.redact_secrets`); default true. */
  readonly redactSecrets?: boolean;
}

/** The `process_manage` tool registration (toolset `terminal`). */
export function processToolRegistration(options: ProcessToolOptions = {}): ToolRegistration {
  const redact = options.redactSecrets ?? true;
  return {
    name: 'process_manage',
    toolset: 'terminal',
    schema: SCHEMA,
    handler: (args, ctx) => runProcess(args, ctx, redact),
    emoji: '⚙️',
  };
}
