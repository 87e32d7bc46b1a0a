/**
 * A task's background-process events as clients receive them: followed from
 * the task's executor (WatchTaskEvents), secrets masked as upstream masks
 * every event it queues, with upstream's text for the conversation, and
 * Berth's `events_dropped` note when some were lost on the way.
 *
 * An event's JSON carries what a sandboxed process printed: it is parsed as
 * hostile input, and one that does not have an event's shape is logged and
 * skipped, never passed on.
 */
import type { Logger } from '../common/logging.js';
import { parseJsonObject } from '../common/json-object.js';
import {
  eventsDropped,
  formatProcessNotification,
  type ProcessNotification,
} from '../common/process-notification.js';
import type { ExecutorClient } from '../gen/berth/v1/executor.js';
import type { TaskEvent } from '../gen/berth/v1/dispatcher.js';
import { redactProcessEvent } from './redaction/output-redaction.js';

/** What a follower of a task's events receives: `ready` once, then events. */
export type TaskEventsItem =
  | { readonly kind: 'ready'; readonly taskId: string; readonly lastId: string }
  | { readonly kind: 'event'; readonly event: TaskEvent };

const EVENT_TYPES: ReadonlySet<string> = new Set([
  'completion',
  'watch_match',
  'watch_disabled',
  'heartbeat',
  'watch_overflow_tripped',
  'watch_overflow_released',
]);
const STRING_FIELDS = ['session_id', 'task_id', 'owner_task_id', 'command', 'output', 'pattern', 'message', 'completion_reason', 'termination_source'];
const NUMBER_FIELDS = ['suppressed', 'seq', 'interval', 'elapsed', 'started_at', 'output_cut'];

/** The event `json` encodes, when it has an event's shape. */
export function parseProcessEvent(json: string): ProcessNotification | undefined {
  const object = parseJsonObject(json);
  if (object === undefined || typeof object.type !== 'string' || !EVENT_TYPES.has(object.type)) return undefined;
  if (STRING_FIELDS.some((k) => k in object && typeof object[k] !== 'string')) return undefined;
  if (NUMBER_FIELDS.some((k) => k in object && typeof object[k] !== 'number')) return undefined;
  if ('exit_code' in object && object.exit_code !== null && typeof object.exit_code !== 'number') return undefined;
  return object as unknown as ProcessNotification;
}

/**
 * Follows one task's events on its executor until `signal` aborts (or the
 * executor ends the stream). `after`: the last id the client saw ("" = every
 * event kept); `fromLatest`: only events from now on.
 */
export async function* followTaskEvents(
  executor: ExecutorClient,
  task: { readonly tenant: string; readonly taskId: string },
  options: { readonly after: string; readonly fromLatest: boolean; readonly signal: AbortSignal; readonly logger: Logger },
): AsyncGenerator<TaskEventsItem> {
  const { taskId } = task;
  const stream = executor.watchTaskEvents(
    { task: { tenant: task.tenant, taskId }, afterId: options.after, fromLatest: options.fromLatest },
    { signal: options.signal },
  );
  for await (const response of stream) {
    const message = response.message;
    if (message === undefined) continue;
    switch (message.$case) {
      case 'subscribed':
        yield { kind: 'ready', taskId, lastId: message.value.lastId };
        break;
      case 'dropped': {
        const { count } = message.value;
        const note = eventsDropped(taskId, count < 0 ? null : count);
        const event = { taskId, id: message.value.id, type: note.type, eventJson: JSON.stringify(note), text: `[IMPORTANT: ${note.message}]` };
        yield { kind: 'event', event };
        break;
      }
      case 'event': {
        const parsed = parseProcessEvent(message.value.eventJson);
        if (parsed === undefined) {
          options.logger.warn({ task: taskId, id: message.value.id }, 'task event without an event shape skipped');
          break;
        }
        const event = redactProcessEvent(parsed);
        yield {
          kind: 'event',
          event: { taskId, id: message.value.id, type: event.type, eventJson: JSON.stringify(event), text: formatProcessNotification(event) },
        };
        break;
      }
    }
  }
}
