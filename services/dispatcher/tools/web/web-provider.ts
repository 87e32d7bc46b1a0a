/**
 * The seam every web provider plugs into, after upstream hermes-agent's
 * `WebSearchProvider`, and the result shapes the model sees (upstream
 * `plugins/web/_common.py`: key order is part of the contract, since it
 * reaches the model as JSON).
 *
 * Providers run in the dispatcher. Their credentials come from the
 * dispatcher's environment and never leave it: not to sandboxes, not to
 * `hermes_tools`, not into results.
 */

/** One search hit, title first as upstream's searxng/tavily rows. Positions are 1-based. */
export interface SearchRow {
  readonly title: string;
  readonly url: string;
  readonly description: string;
  readonly position: number;
}

export type SearchResult =
  | { readonly success: true; readonly data: { readonly web: SearchRow[] } }
  | { readonly success: false; readonly error: string };

/** One extracted page, or the reason it has no content (`error`). */
export interface ExtractedPage {
  readonly url: string;
  readonly title: string;
  readonly content: string;
  readonly error?: string;
}

export interface WebProvider {
  /** Config name (`web.backend: tavily`). */
  readonly name: string;
  /** Name in messages ("Tavily returned HTTP 500"). */
  readonly displayName: string;
  /** Environment variables the provider needs, for `berth tools --explain`. */
  readonly envVars: readonly string[];
  /** Cheap: environment only, no network. */
  isAvailable(): boolean;
  /** Why isAvailable() is false, naming what to set; '' when available. */
  unavailableReason(): string;
  supportsSearch(): boolean;
  supportsExtract(): boolean;
  /** Never throws for provider trouble: failures are `{success: false, error}`. */
  search(query: string, limit: number, signal: AbortSignal): Promise<SearchResult>;
  /** One entry per URL, in order; failures are entries with `error`. Content is not truncated here. */
  extract(urls: readonly string[], signal: AbortSignal): Promise<ExtractedPage[]>;
}

/** Every vendor caps results per query at 20 server-side (upstream SEARCH_LIMIT_CAP). */
export const SEARCH_LIMIT_CAP = 20;

export const INTERRUPTED = 'Interrupted';

export function searchOk(rows: SearchRow[]): SearchResult {
  return { success: true, data: { web: rows } };
}

export function searchFail(error: string): SearchResult {
  return { success: false, error };
}

export function pageError(url: string, error: string): ExtractedPage {
  return { url, title: '', content: '', error };
}

/** A field of a provider's JSON as upstream's `str()`: missing is '', anything else its text. */
export function text(value: unknown): string {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value as number | boolean);
}

/** The environment a provider reads, as upstream's `get_provider_env`: trimmed, '' when unset. */
export type ProviderEnv = (name: string) => string;

export function providerEnv(env: NodeJS.ProcessEnv): ProviderEnv {
  return (name) => env[name]?.trim() ?? '';
}

/** A provider API answered with something other than a parsed JSON body. */
export class ProviderHttpError extends Error {
  override readonly name = 'ProviderHttpError';
}

/** Responses of provider APIs are read up to this size; a search answer is far smaller. */
const MAX_API_RESPONSE_BYTES = 8 * 1024 * 1024;

export interface JsonRequest {
  /** Label in "{label} returned HTTP {code}" and "Could not parse {label} response as JSON". */
  readonly label: string;
  /** Subject of "Could not reach {target}: ..." (SearXNG names its URL). */
  readonly reachTarget: string;
  readonly url: string;
  readonly method: 'GET' | 'POST';
  readonly headers?: Record<string, string>;
  readonly body?: string;
  readonly timeoutMs: number;
  readonly signal: AbortSignal;
}

/**
 * One request to a provider's API (an operator-chosen endpoint, so no
 * address rules), answered by its parsed JSON. Throws ProviderHttpError with
 * upstream's texts; an abort of `signal` propagates as the AbortError.
 */
export async function requestJson(request: JsonRequest): Promise<unknown> {
  const deadline = AbortSignal.timeout(request.timeoutMs);
  let response: Response;
  try {
    response = await fetch(request.url, {
      method: request.method,
      headers: request.headers ?? {},
      ...(request.body === undefined ? {} : { body: request.body }),
      signal: AbortSignal.any([request.signal, deadline]),
      redirect: 'follow',
    });
  } catch (err) {
    if (request.signal.aborted) throw err;
    throw new ProviderHttpError(`Could not reach ${request.reachTarget}: ${describeFetchError(err, deadline, request.timeoutMs)}`);
  }
  if (!response.ok) {
    await response.body?.cancel().catch(() => undefined);
    throw new ProviderHttpError(`${request.label} returned HTTP ${response.status}`);
  }
  let body: string;
  try {
    body = await readLimited(response, MAX_API_RESPONSE_BYTES);
  } catch (err) {
    if (request.signal.aborted) throw err;
    throw new ProviderHttpError(`Could not reach ${request.reachTarget}: ${describeFetchError(err, deadline, request.timeoutMs)}`);
  }
  try {
    return JSON.parse(body) as unknown;
  } catch {
    throw new ProviderHttpError(`Could not parse ${request.label} response as JSON`);
  }
}

async function readLimited(response: Response, maxBytes: number): Promise<string> {
  if (response.body === null) return '';
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of response.body as AsyncIterable<Uint8Array>) {
    total += chunk.byteLength;
    if (total > maxBytes) throw new Error(`response larger than ${maxBytes} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function describeFetchError(err: unknown, deadline: AbortSignal, timeoutMs: number): string {
  if (deadline.aborted) return `timed out after ${timeoutMs / 1000}s`;
  // undici puts the socket error (ECONNREFUSED ...) in `cause`; its own message is just "fetch failed".
  const cause = (err as { cause?: unknown }).cause;
  if (cause instanceof Error && cause.message !== '') return cause.message;
  return err instanceof Error ? err.message : String(err);
}
