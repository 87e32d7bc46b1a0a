/**
 * Events about background processes, as the executor's process registry
 * produces them and a delivery path carries them to the agent: completions
 * (`notify_on_complete`), watch-pattern matches and their rate-limit
 * summaries, and heartbeats. Field names, key order and the rendered text are
 * upstream hermes-agent's (`process_registry.py` event dicts,
 * `process_registry_notifications.format_process_notification`), so an agent
 * written for Hermes can be handed the text unchanged. Upstream's chat-routing
 * keys (`session_key`, `platform`, `chat_id`, ...) are left out: Berth routes
 * an event by the task that owns it.
 */

/** What every event about one process starts with (upstream `_watch_event_base`, without chat routing). */
export interface ProcessEventBase {
  readonly session_id: string;
  readonly task_id: string;
  readonly owner_task_id: string;
  readonly command: string;
}

/** A `notify_on_complete` process moved to finished. */
export interface CompletionEvent extends ProcessEventBase {
  readonly type: 'completion';
  readonly exit_code: number | null;
  readonly completion_reason: string;
  readonly termination_source: string;
  /** The last 2,000 characters of output, ANSI stripped. */
  readonly output: string;
  /** Characters of the buffer before `output`, when there were any. */
  readonly output_cut?: number;
  /** Seconds since the epoch. */
  readonly started_at: number;
}

/** Lines of one chunk of output contained a watch pattern. */
export interface WatchMatchEvent extends ProcessEventBase {
  readonly type: 'watch_match';
  /** The first pattern (in the order given) found in the first matching line. */
  readonly pattern: string;
  /** The matching lines (at most 20, 2,000 characters, then `\n...(truncated)`). */
  readonly output: string;
  /** Matching lines dropped by the rate limit since the last delivered match. */
  readonly suppressed: number;
}

/** Watching stopped for one process (too many rate-limit strikes, or the lifetime cap). */
export interface WatchDisabledEvent extends ProcessEventBase {
  readonly type: 'watch_disabled';
  readonly suppressed: number;
  readonly message: string;
}

/** A long job is still running: the output it produced since the last notice. */
export interface HeartbeatEvent extends ProcessEventBase {
  readonly type: 'heartbeat';
  readonly seq: number;
  /** Seconds between heartbeats. */
  readonly interval: number;
  /** Whole seconds since the process started. */
  readonly elapsed: number;
  readonly output: string;
  readonly started_at: number;
}

/** Too many watch matches across a tenant's processes: matches are dropped for a while. Not about one process. */
export interface WatchOverflowTrippedEvent {
  readonly session_id: '';
  readonly command: '';
  readonly type: 'watch_overflow_tripped';
  readonly message: string;
}

/** The overflow cooldown ended; says how many matches it dropped. Not about one process. */
export interface WatchOverflowReleasedEvent {
  readonly session_id: '';
  readonly command: '';
  readonly type: 'watch_overflow_released';
  readonly suppressed: number;
  readonly message: string;
}

export type ProcessNotification =
  | CompletionEvent
  | WatchMatchEvent
  | WatchDisabledEvent
  | HeartbeatEvent
  | WatchOverflowTrippedEvent
  | WatchOverflowReleasedEvent;

/**
 * Header upstream puts before several completions delivered together
 * (consecutive completions only; any other event ends a batch), joined to
 * their texts with blank lines.
 */
export function completionBatchHeader(count: number): string {
  return (
    `[IMPORTANT: ${count} background processes completed. Treat these results as one batch and give one ` +
    'consolidated response; preserve failures and actionable results.]'
  );
}

/** Elapsed time as upstream's `_format_age` writes it: `45s`, `18m`, `18m5s`, `2h`, `2h3m`. */
export function formatAge(seconds: number): string {
  const s = Math.max(0, Math.trunc(Number.isFinite(seconds) ? seconds : 0));
  if (s < 60) return `${s}s`;
  const minutes = Math.trunc(s / 60);
  const rest = s % 60;
  if (minutes < 60) return `${minutes}m${rest ? `${rest}s` : ''}`;
  const hours = Math.trunc(minutes / 60);
  const restMinutes = minutes % 60;
  return `${hours}h${restMinutes ? `${restMinutes}m` : ''}`;
}

const REASON_STATUS: Readonly<Record<string, string>> = {
  lost: 'marked lost because the process backend disappeared',
  failed_start: 'failed to start',
};

function completionStatus(event: CompletionEvent): string {
  const reason = event.completion_reason || 'exited';
  if (reason === 'killed') return `terminated by ${event.termination_source || 'Hermes'}`;
  return REASON_STATUS[reason] ?? (event.exit_code === 0 ? 'completed normally' : 'exited');
}

/**
 * The text upstream injects into the conversation for an event
 * (`format_process_notification`; no subagent attribution line: Berth runs
 * no subagents).
 */
export function formatProcessNotification(event: ProcessNotification): string {
  switch (event.type) {
    case 'watch_disabled':
    case 'watch_overflow_tripped':
    case 'watch_overflow_released':
      return `[IMPORTANT: ${event.message}]`;
    case 'heartbeat':
      return (
        `[Background process ${event.session_id} heartbeat #${event.seq} — still running after ` +
        `${formatAge(event.elapsed)} (next in ${event.interval}s when there is new output; you will also be told ` +
        `when it exits).\nCommand: ${event.command}\nOutput since last heartbeat:\n${event.output}]`
      );
    case 'watch_match':
      return (
        `[IMPORTANT: Background process ${event.session_id} matched watch pattern "${event.pattern}".\n` +
        `Command: ${event.command}\nMatched output:\n${event.output}` +
        (event.suppressed ? `\n(${event.suppressed} earlier matches were suppressed by rate limit)` : '') +
        ']'
      );
    case 'completion': {
      const signal = event.exit_code === -15 || event.exit_code === 143 ? ', SIGTERM' : '';
      const output = event.output_cut
        ? `...(first ${event.output_cut} characters cut — process(action="log", session_id="${event.session_id}") ` +
          `has the full output)\n${event.output}`
        : event.output;
      return (
        `[IMPORTANT: Background process ${event.session_id} ${completionStatus(event)} ` +
        `(exit code ${event.exit_code ?? 'None'}${signal}).\nCommand: ${event.command}\nOutput:\n${output}]`
      );
    }
  }
}

/** Shortest heartbeat interval (upstream `HEARTBEAT_MIN_SECONDS`): a heartbeat must not become a fast poll. */
export const HEARTBEAT_MIN_SECONDS = 60;

/** The interval a heartbeat request gets: 0 stays off, anything else at least {@link HEARTBEAT_MIN_SECONDS}. */
export function effectiveHeartbeatSeconds(requested: number): number {
  return requested > 0 ? Math.max(Math.trunc(requested), HEARTBEAT_MIN_SECONDS) : 0;
}

/**
 * How much of each task's event history an executor keeps for clients that
 * reconnect (`after` = the last id they saw): a task's newest
 * `perTask` events, none older than `maxAgeMinutes`, and at most `total`
 * events or `totalChars` characters of event JSON across all tasks (the
 * oldest go first). A task whose log has had no event for `maxAgeMinutes`
 * is forgotten; its next event starts a new log.
 */
export const EVENT_RETENTION = {
  perTask: 100,
  maxAgeMinutes: 30,
  total: 20_000,
  totalChars: 64 * 1024 * 1024,
  /** Tasks with a log, at most (the one with the oldest last event goes first). */
  tasks: 10_000,
} as const;

/** Berth's marker when events a client has not seen are gone (not an upstream event: upstream has no reconnect). */
export interface EventsDroppedEvent {
  readonly type: 'events_dropped';
  readonly task_id: string;
  /** How many; null when the log was started afresh and the number is not known. */
  readonly count: number | null;
  readonly message: string;
}

/** The marker for `count` dropped events of `taskId` (null: an unknown number). */
export function eventsDropped(taskId: string, count: number | null): EventsDroppedEvent {
  const what =
    count === null
      ? `Background-process events of task ${taskId} may have been missed: the log they were kept in is gone ` +
        '(the executor restarted, or the task had no event for ' +
        `${EVENT_RETENTION.maxAgeMinutes} minutes).`
      : `${count} background-process event(s) of task ${taskId} were dropped before this client received them ` +
        `(a task's last ${EVENT_RETENTION.perTask} events are kept, for ${EVENT_RETENTION.maxAgeMinutes} minutes).`;
  return {
    type: 'events_dropped',
    task_id: taskId,
    count,
    message: `${what} Check on its processes with process(action="list").`,
  };
}
