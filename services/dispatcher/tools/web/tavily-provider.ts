/**
 * Tavily: search and extract through its HTTP API, `POST {base}/search` and
 * `POST {base}/extract` with `api_key` in the JSON body (no auth header).
 * Env: TAVILY_API_KEY; TAVILY_API_URL (or TAVILY_BASE_URL, the name newer
 * upstream reads) overrides https://api.tavily.com.
 */
import {
  ProviderHttpError,
  SEARCH_LIMIT_CAP,
  pageError,
  requestJson,
  searchFail,
  searchOk,
  text,
  type ExtractedPage,
  type ProviderEnv,
  type SearchResult,
  type WebProvider,
} from './web-provider.js';

export const TAVILY_DEFAULT_URL = 'https://api.tavily.com';
/** Upstream's httpx timeout for Tavily calls. */
export const TAVILY_TIMEOUT_MS = 60_000;
export const TAVILY_MISSING_KEY =
  'TAVILY_API_KEY environment variable not set. Get your API key at https://app.tavily.com/home';

function records(value: unknown): Record<string, unknown>[] {
  return Array.isArray(value) ? value.filter((r): r is Record<string, unknown> => typeof r === 'object' && r !== null) : [];
}

/** `/search` answer to rows: results[].title/url/content, positions from 1. */
export function tavilySearchRows(response: unknown): SearchResult {
  const results = records((response as { results?: unknown } | null)?.results);
  return searchOk(
    results.map((r, i) => ({ title: text(r.title), url: text(r.url), description: text(r.content), position: i + 1 })),
  );
}

/** `/extract` answer to pages: results (raw_content, else content), then failed_results, then failed_urls. */
export function tavilyPages(response: unknown, fallbackUrl: string): ExtractedPage[] {
  const body = (typeof response === 'object' && response !== null ? response : {}) as Record<string, unknown>;
  const pages: ExtractedPage[] = records(body.results).map((r) => ({
    url: r.url === undefined ? fallbackUrl : text(r.url),
    title: text(r.title),
    content: text(r.raw_content) || text(r.content),
  }));
  for (const failed of records(body.failed_results)) {
    pages.push(pageError(failed.url === undefined ? fallbackUrl : text(failed.url), failed.error === undefined ? 'extraction failed' : text(failed.error)));
  }
  for (const failed of Array.isArray(body.failed_urls) ? (body.failed_urls as unknown[]) : []) {
    pages.push(pageError(text(failed), 'extraction failed'));
  }
  return pages;
}

export class TavilyProvider implements WebProvider {
  readonly name = 'tavily';
  readonly displayName = 'Tavily';
  readonly envVars = ['TAVILY_API_KEY'] as const;
  readonly #env: ProviderEnv;

  constructor(env: ProviderEnv) {
    this.#env = env;
  }

  isAvailable(): boolean {
    return this.#env('TAVILY_API_KEY') !== '';
  }

  unavailableReason(): string {
    return this.isAvailable() ? '' : 'TAVILY_API_KEY is not set';
  }

  supportsSearch(): boolean {
    return true;
  }

  supportsExtract(): boolean {
    return true;
  }

  async search(query: string, limit: number, signal: AbortSignal): Promise<SearchResult> {
    try {
      const response = await this.#post(
        'search',
        { query, max_results: Math.min(limit, SEARCH_LIMIT_CAP), include_raw_content: false, include_images: false },
        signal,
      );
      return tavilySearchRows(response);
    } catch (err) {
      if (err instanceof ProviderHttpError) return searchFail(err.message);
      if (signal.aborted) throw err;
      return searchFail(`Tavily search failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  async extract(urls: readonly string[], signal: AbortSignal): Promise<ExtractedPage[]> {
    try {
      const response = await this.#post('extract', { urls: [...urls], include_images: false }, signal);
      return tavilyPages(response, urls[0] ?? '');
    } catch (err) {
      if (err instanceof ProviderHttpError) return urls.map((url) => pageError(url, err.message));
      if (signal.aborted) throw err;
      const message = `Tavily extract failed: ${err instanceof Error ? err.message : String(err)}`;
      return urls.map((url) => pageError(url, message));
    }
  }

  async #post(endpoint: 'search' | 'extract', payload: Record<string, unknown>, signal: AbortSignal): Promise<unknown> {
    const apiKey = this.#env('TAVILY_API_KEY');
    if (apiKey === '') throw new ProviderHttpError(TAVILY_MISSING_KEY);
    const base = (this.#env('TAVILY_API_URL') || this.#env('TAVILY_BASE_URL') || TAVILY_DEFAULT_URL).replace(/\/+$/, '');
    return requestJson({
      label: 'Tavily',
      reachTarget: 'Tavily',
      url: `${base}/${endpoint}`,
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify({ ...payload, api_key: apiKey }),
      timeoutMs: TAVILY_TIMEOUT_MS,
      signal,
    });
  }
}
