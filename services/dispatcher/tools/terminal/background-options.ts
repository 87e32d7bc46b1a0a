/**
 * The terminal call's background modifiers, read as upstream's handler reads
 * them (`_handle_terminal`): `notify` (true: one notice at exit; a list of
 * strings: watch patterns), `heartbeat` (seconds; implies notify),
 * `persist_on_release`, `pty`, and the older `notify_on_complete` and
 * `watch_patterns` (no longer advertised, still accepted; an explicit
 * `notify` wins). Modifiers that only mean something in the background are
 * refused on a foreground call with the corrected call, before anything
 * runs. Errors have upstream's shape, `{"error": ...}`.
 */
import type { ToolArgs } from '../../registry/tool-types.js';

export interface BackgroundModifiers {
  readonly notifyOnComplete: boolean;
  /** As requested (before the conflict with notify-on-complete is resolved); undefined: none. */
  readonly watchPatterns: readonly string[] | undefined;
  /** As requested; the executor raises positive values to its floor (60). */
  readonly heartbeatSeconds: number;
  readonly persistOnRelease: boolean;
  readonly pty: boolean;
}

export const HEARTBEAT_ERROR =
  'heartbeat must be a whole number of seconds (0 disables; positive values are clamped to min 60).';

export const FOREGROUND_NOTIFY_ERROR =
  'notify/heartbeat only apply to background commands (foreground results return directly). Either drop them, ' +
  'or run as terminal(command=..., background=true, notify=...).';

export const FOREGROUND_PTY_ERROR =
  "pty requires background=true (a PTY session is interacted with via process(action='write'/'submit'), which " +
  'needs a tracked background process). Retry as terminal(command=..., background=true, pty=true).';

export const FOREGROUND_PERSIST_ERROR =
  'persist_on_release only applies to background commands (a foreground process is awaited inline and has ' +
  'nothing to persist). Retry as terminal(command=..., background=true, persist_on_release=true).';

export const NOTIFY_TYPE_ERROR =
  'notify must be true/false (notify on exit) or a list of strings (notify on output pattern match).';

/** Python's truthiness of a JSON value: what upstream's `if value:` decides. */
function truthy(value: unknown): boolean {
  if (value === undefined || value === null || value === false || value === 0 || value === '') return false;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === 'object') return Object.keys(value).length > 0;
  return true;
}

/**
 * The legacy boolean: no longer in the schema, so nothing coerces a string
 * for it; "true" counts, "false" does not (Python would take any non-empty
 * string as true).
 */
function legacyFlag(value: unknown): boolean {
  if (typeof value === 'string') return value.trim().toLowerCase() === 'true';
  return truthy(value);
}

/** Non-empty strings of a list; a lone string is one pattern. Undefined when none. */
function patternList(value: unknown): string[] | undefined {
  const items = typeof value === 'string' ? [value] : Array.isArray(value) ? value : [];
  const strings = items.filter((item): item is string => typeof item === 'string' && item !== '');
  return strings.length > 0 ? strings : undefined;
}

const refusal = (error: string) => JSON.stringify({ error });

/** The modifiers of a call, or the result string that refuses it. */
export function readBackgroundModifiers(args: ToolArgs, background: boolean): BackgroundModifiers | string {
  const notify = args.notify;
  let notifyOnComplete = legacyFlag(args.notify_on_complete);
  let watchPatterns = patternList(args.watch_patterns);
  const heartbeat = truthy(args.heartbeat) ? args.heartbeat : 0;
  if (typeof heartbeat !== 'number' || !Number.isSafeInteger(heartbeat) || heartbeat < 0) return refusal(HEARTBEAT_ERROR);
  const persistOnRelease = truthy(args.persist_on_release);
  const pty = truthy(args.pty);
  if (!background) {
    if (truthy(notify) || truthy(args.watch_patterns) || notifyOnComplete || heartbeat) {
      return refusal(FOREGROUND_NOTIFY_ERROR);
    }
    if (pty) return refusal(FOREGROUND_PTY_ERROR);
    if (persistOnRelease) return refusal(FOREGROUND_PERSIST_ERROR);
  }
  if (notify !== undefined && notify !== null) {
    if (typeof notify === 'boolean') {
      notifyOnComplete = notify;
      watchPatterns = undefined;
    } else if (Array.isArray(notify)) {
      watchPatterns = patternList(notify);
      notifyOnComplete = false;
    } else {
      return refusal(NOTIFY_TYPE_ERROR);
    }
  }
  // Heartbeats ride the completion's delivery, so they imply it.
  if (heartbeat) notifyOnComplete = true;
  return { notifyOnComplete, watchPatterns, heartbeatSeconds: heartbeat, persistOnRelease, pty };
}

/**
 * Commands that read piped input to its end and break under a PTY
 * (upstream `_command_requires_pipe_stdin`): `gh auth login --with-token`.
 */
export function commandRequiresPipeStdin(command: string): boolean {
  const normalized = command.toLowerCase().split(/\s+/).filter(Boolean).join(' ');
  return normalized.startsWith('gh auth login') && normalized.includes('--with-token');
}

/** Upstream's `pty_note` when a PTY was asked for and dropped for such a command. */
export const PTY_DISABLED_NOTE =
  'PTY disabled for this command because it expects piped stdin/EOF (for example gh auth login --with-token). ' +
  "For local background processes, call process(action='close') after writing so it receives EOF.";
