/**
 * What the file tools share: argument readers, the `{"error": ...}` guard,
 * size and binary helpers, and the "File not found" suggestions.
 */
import { posix } from 'node:path';
import { BerthError, NotFoundError } from '../../../common/errors.js';
import { shellQuote } from '../../../common/shell/quote.js';
import type { TaskClient } from '../../../common/task-client.js';
import type { ToolArgs, ToolContext, ToolHandler } from '../../registry/tool-types.js';

export const TOOLSET = 'file';
export const HELPER_TIMEOUT_MS = 30_000;
/** Bytes inspected for NUL when deciding a file is binary (git and grep use the same idea). */
const BINARY_SNIFF_BYTES = 8192;

export type JsonObject = Record<string, unknown>;

/** A problem the model caused and can fix; becomes `{"error": message, ...extra}`. */
export class ToolInputError extends Error {
  readonly extra: JsonObject;
  constructor(message: string, extra: JsonObject = {}) {
    super(message);
    this.name = 'ToolInputError';
    this.extra = extra;
  }
}

export function guarded(run: (args: ToolArgs, context: ToolContext) => Promise<JsonObject>): ToolHandler {
  return async (args, context) => {
    try {
      return JSON.stringify(await run(args, context));
    } catch (err) {
      if (err instanceof ToolInputError) return JSON.stringify({ error: err.message, ...err.extra });
      // The environment refused the path itself (a device, FIFO or socket, a file over the read cap, a directory),
      // or the patch engine refused the patch text (PatchError): the model can act on that, so it reads the
      // reason as the tool's error.
      if (err instanceof BerthError && err.code === 'INVALID_ARGUMENT') return JSON.stringify({ error: err.message });
      throw err;
    }
  };
}

export function stringArg(args: ToolArgs, name: string, required: true): string;
export function stringArg(args: ToolArgs, name: string, required: false): string | undefined;
export function stringArg(args: ToolArgs, name: string, required: boolean): string | undefined {
  const value = args[name];
  if (value === undefined || value === null) {
    if (required) throw new ToolInputError(`Missing required parameter: ${name}`);
    return undefined;
  }
  if (typeof value !== 'string') throw new ToolInputError(`Parameter ${name} must be a string`);
  return value;
}

export function nonEmptyStringArg(args: ToolArgs, name: string): string {
  const value = stringArg(args, name, true);
  if (value.trim() === '') throw new ToolInputError(`Parameter ${name} must not be empty`);
  return value;
}

/** Integer argument with a default; out-of-range values are clamped rather than refused. */
export function intArg(args: ToolArgs, name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const value = args[name];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new ToolInputError(`Parameter ${name} must be an integer`);
  return Math.min(max, Math.max(min, Math.floor(value)));
}

export function boolArg(args: ToolArgs, name: string, fallback: boolean): boolean {
  const value = args[name];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'boolean') throw new ToolInputError(`Parameter ${name} must be true or false`);
  return value;
}

export function enumArg<T extends string>(args: ToolArgs, name: string, allowed: readonly T[], fallback: T): T {
  const value = args[name];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw new ToolInputError(`Parameter ${name} must be one of: ${allowed.join(', ')}`);
  }
  return value as T;
}

export function formatSize(bytes: number): string {
  if (bytes < 1024) return `${bytes} bytes`;
  const units = ['KB', 'MB', 'GB', 'TB'];
  let size = bytes / 1024;
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit++;
  }
  return `${size.toFixed(1)} ${units[unit]} (${bytes.toLocaleString('en-US')} bytes)`;
}

export function isBinary(content: Buffer): boolean {
  return content.subarray(0, BINARY_SNIFF_BYTES).includes(0);
}

export async function readIfExists(task: TaskClient, path: string): Promise<{ absPath: string; content: Buffer } | undefined> {
  try {
    return await task.readFile(path);
  } catch (err) {
    if (err instanceof NotFoundError) return undefined;
    throw err;
  }
}

/** `File not found` plus, when a directory listing is cheap, names that look like what was meant. */
export async function fileNotFound(path: string, absPath: string, context: ToolContext): Promise<ToolInputError> {
  const suggestions = await similarFiles(path, absPath, context).catch(() => []);
  return new ToolInputError(`File not found: ${path}`, suggestions.length > 0 ? { similar_files: suggestions } : {});
}

export async function similarFiles(path: string, absPath: string, context: ToolContext): Promise<string[]> {
  const listing = await context.task.exec({
    command: `ls -1Ap -- ${shellQuote(posix.dirname(absPath))} 2>/dev/null | head -n 5000`,
    stateless: true,
    timeoutMs: HELPER_TIMEOUT_MS,
    maxOutputChars: 500_000,
    signal: context.signal,
  });
  if (listing.exitCode !== 0) return [];
  const wanted = posix.basename(absPath).toLowerCase();
  const wantedStem = stem(wanted);
  const scored: { name: string; score: number }[] = [];
  for (const name of listing.output.split('\n')) {
    if (name === '' || name.endsWith('/')) continue;
    const candidate = name.toLowerCase();
    let score: number | undefined;
    if (candidate === wanted) score = 0;
    else if (stem(candidate) === wantedStem) score = 1;
    else {
      const distance = editDistance(candidate, wanted, 3);
      if (distance <= Math.max(1, Math.min(3, Math.floor(wanted.length / 4)))) score = 1 + distance;
      else if (wanted.length >= 3 && (candidate.includes(wanted) || wanted.includes(candidate))) score = 5;
    }
    if (score !== undefined) scored.push({ name, score });
  }
  const directory = posix.dirname(path);
  return scored
    .sort((a, b) => a.score - b.score || a.name.localeCompare(b.name))
    .slice(0, 5)
    .map(({ name }) => (directory === '.' ? name : posix.join(directory, name)));
}

export function stem(name: string): string {
  const dot = name.lastIndexOf('.');
  return dot > 0 ? name.slice(0, dot) : name;
}

/** Levenshtein distance, giving up (returning `cap + 1`) once it must exceed `cap`. */
export function editDistance(a: string, b: string, cap: number): number {
  if (Math.abs(a.length - b.length) > cap) return cap + 1;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      const value = Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, (previous[j - 1] ?? 0) + cost);
      current.push(value);
      rowMin = Math.min(rowMin, value);
    }
    if (rowMin > cap) return cap + 1;
    previous = current;
  }
  return previous[b.length] ?? cap + 1;
}
