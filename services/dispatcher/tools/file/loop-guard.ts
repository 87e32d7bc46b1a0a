/**
 * Stops a model that keeps reading or searching the same thing.
 *
 * Two guards share one record per task (and session), as upstream Hermes has
 * them (`tools/file_tools.py`, `_read_tracker`):
 *
 * - consecutive identical calls: the same read_file region or the same
 *   search_files query, with nothing else in between, warns on the 3rd call
 *   and is refused from the 4th. Reads and searches share the "last call"
 *   slot, so a search between two reads breaks a read streak.
 * - read_file dedup: a region already returned whose file has not changed
 *   since gets a short "unchanged" stub instead of the content again (saving
 *   context), and a refusal from the 3rd call.
 *
 * Any other tool call resets the streaks (the registry tells every
 * {@link ToolCallObserver} about every dispatch). State is bounded: at most
 * {@link MAX_TRACKED_TASKS} tasks, least recently used dropped first, at most
 * {@link MAX_DEDUP_ENTRIES} remembered regions per task, and a task's record
 * is dropped when the task ends.
 */
import { createHash } from 'node:crypto';
import type { ToolCallObserver, ToolContext } from '../../registry/tool-types.js';
import { viewAfterRead, viewAfterWrite, type FileView, type ReadPage } from './file-views.js';

/** Tasks (task + session pairs) whose reads are remembered; the least recently used go first. */
export const MAX_TRACKED_TASKS = 1024;
/** Regions remembered per task for dedup; the oldest go first. */
export const MAX_DEDUP_ENTRIES = 256;

/** The two tools that keep their own streaks; every other tool call resets them. */
const TRACKED_TOOLS: ReadonlySet<string> = new Set(['read_file', 'search_files']);

/** Upstream's text; write_file refuses content that is this message. */
export const READ_DEDUP_STATUS_MESSAGE =
  'File unchanged since last read. The content from the earlier read_file result in this conversation is ' +
  'still current — refer to that instead of re-reading.';

interface TaskRecord {
  /** The last read or search, as a key; undefined after any other tool call. */
  lastKey: string | undefined;
  consecutive: number;
  /** Region key → fingerprint of the file content when it was returned. */
  readonly dedup: Map<string, string>;
  /** Region key → how many stubs were returned for it since the last real read or other tool call. */
  readonly dedupHits: Map<string, number>;
  /** File → what this task has seen of it (for write_file's overwrite refusal; file-views.ts). */
  readonly views: Map<string, FileView>;
}

/** What read_file does with a region it already returned. */
export type DedupVerdict = { readonly kind: 'unchanged' } | { readonly kind: 'blocked'; readonly count: number };

export class FileLoopGuard implements ToolCallObserver {
  readonly #tasks = new Map<string, TaskRecord>();
  readonly #maxTasks: number;
  readonly #maxDedup: number;

  constructor(options: { maxTasks?: number; maxDedupEntries?: number } = {}) {
    this.#maxTasks = options.maxTasks ?? MAX_TRACKED_TASKS;
    this.#maxDedup = options.maxDedupEntries ?? MAX_DEDUP_ENTRIES;
  }

  /** From the registry, for every dispatched call: anything but a read or search breaks the streaks. */
  toolCalled(toolName: string, context: ToolContext): void {
    if (TRACKED_TOOLS.has(toolName)) return;
    const record = this.#tasks.get(recordKey(context));
    if (record === undefined) return;
    record.lastKey = undefined;
    record.consecutive = 0;
    record.dedupHits.clear();
  }

  taskEnded(tenant: string, taskId: string): void {
    const prefix = `${tenant}\u0000${taskId}\u0000`;
    for (const key of [...this.#tasks.keys()]) if (key.startsWith(prefix)) this.#tasks.delete(key);
  }

  /**
   * Before returning a region: `unchanged` (1st repeat) or `blocked` (from the
   * 3rd call) when this exact region was returned before and the file's
   * fingerprint is the same; undefined to return the content.
   */
  checkDedup(context: ToolContext, region: string, fingerprint: string): DedupVerdict | undefined {
    const record = this.#tasks.get(recordKey(context));
    if (record === undefined || record.dedup.get(region) !== fingerprint) return undefined;
    this.#touch(context, record);
    const hits = (record.dedupHits.get(region) ?? 0) + 1;
    setBounded(record.dedupHits, region, hits, this.#maxDedup);
    return hits >= 2 ? { kind: 'blocked', count: hits + 1 } : { kind: 'unchanged' };
  }

  /**
   * After a real read: remembers the region (when the file was read, i.e. a
   * fingerprint exists) and returns how many times in a row this read was made.
   */
  recordRead(context: ToolContext, callKey: string, region: string, fingerprint: string | undefined): number {
    const record = this.#record(context);
    record.dedupHits.delete(region);
    if (fingerprint !== undefined) setBounded(record.dedup, region, fingerprint, this.#maxDedup);
    return this.#count(record, `read\u0000${callKey}`);
  }

  /** Counts a search; returns how many times in a row this exact search was made. */
  recordSearch(context: ToolContext, callKey: string): number {
    return this.#count(this.#record(context), `search\u0000${callKey}`);
  }

  /** A file was written: its regions must be returned again in full. */
  forgetPath(context: ToolContext, absPath: string): void {
    const record = this.#tasks.get(recordKey(context));
    if (record === undefined) return;
    const prefix = `${absPath}\u0000`;
    for (const key of [...record.dedup.keys()]) if (key.startsWith(prefix)) record.dedup.delete(key);
  }

  /**
   * Files were changed in ways not tracked path by path (a patch): forget
   * every region and view, so the next read returns content and a
   * whole-file overwrite needs a fresh read first.
   */
  forgetAllPaths(context: ToolContext): void {
    const record = this.#tasks.get(recordKey(context));
    record?.dedup.clear();
    record?.views.clear();
  }

  /** A read_file page of a file was returned to this task. */
  noteRead(context: ToolContext, absPath: string, page: ReadPage): void {
    const views = this.#record(context).views;
    setBounded(views, absPath, viewAfterRead(views.get(absPath), page), this.#maxDedup);
  }

  /** This task wrote the whole file: it knows its content. */
  noteWrite(context: ToolContext, absPath: string, fingerprint: string): void {
    setBounded(this.#record(context).views, absPath, viewAfterWrite(fingerprint), this.#maxDedup);
  }

  /** What this task has seen of a file; undefined when it never read or wrote it. */
  view(context: ToolContext, absPath: string): FileView | undefined {
    return this.#tasks.get(recordKey(context))?.views.get(absPath);
  }

  #count(record: TaskRecord, key: string): number {
    if (record.lastKey === key) record.consecutive += 1;
    else {
      record.lastKey = key;
      record.consecutive = 1;
    }
    return record.consecutive;
  }

  #record(context: ToolContext): TaskRecord {
    const key = recordKey(context);
    let record = this.#tasks.get(key);
    if (record === undefined) {
      record = { lastKey: undefined, consecutive: 0, dedup: new Map(), dedupHits: new Map(), views: new Map() };
      if (this.#tasks.size >= this.#maxTasks) {
        const oldest = this.#tasks.keys().next().value;
        if (oldest !== undefined) this.#tasks.delete(oldest);
      }
    } else {
      this.#tasks.delete(key);
    }
    this.#tasks.set(key, record);
    return record;
  }

  #touch(context: ToolContext, record: TaskRecord): void {
    const key = recordKey(context);
    this.#tasks.delete(key);
    this.#tasks.set(key, record);
  }
}

/** What the guard compares to tell whether a file changed: a hash of its bytes. */
export function contentFingerprint(content: Uint8Array): string {
  return createHash('sha256').update(content).digest('hex');
}

/** The dedup key of a read: the resolved file and the page asked for. */
export function readRegionKey(absPath: string, offset: number, limit: number): string {
  return `${absPath}\u0000${offset}\u0000${limit}`;
}

function recordKey(context: ToolContext): string {
  return `${context.tenant}\u0000${context.taskId}\u0000${context.sessionId}`;
}

function setBounded<V>(map: Map<string, V>, key: string, value: V, max: number): void {
  map.delete(key);
  map.set(key, value);
  while (map.size > max) {
    const oldest = map.keys().next().value;
    if (oldest === undefined) break;
    map.delete(oldest);
  }
}
