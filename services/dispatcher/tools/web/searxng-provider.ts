/**
 * SearXNG: search through a self-hosted metasearch instance
 * (`GET {SEARXNG_URL}/search?q=...&format=json&pageno=1`). Search only.
 * Env: SEARXNG_URL (e.g. http://localhost:8080), SEARXNG_TIMEOUT (seconds,
 * default 15, at least 5), as upstream's plugin.
 */
import {
  ProviderHttpError,
  requestJson,
  searchFail,
  searchOk,
  text,
  type ExtractedPage,
  type ProviderEnv,
  type SearchResult,
  type WebProvider,
} from './web-provider.js';

export const SEARXNG_DEFAULT_TIMEOUT_SEC = 15;
export const SEARXNG_MIN_TIMEOUT_SEC = 5;

/** SEARXNG_TIMEOUT in seconds: unset or unparsable is the default; below the floor is the floor. */
export function searxngTimeoutSec(raw: string): number {
  if (raw === '') return SEARXNG_DEFAULT_TIMEOUT_SEC;
  const n = Number(raw);
  if (!Number.isFinite(n)) return SEARXNG_DEFAULT_TIMEOUT_SEC;
  return Math.max(SEARXNG_MIN_TIMEOUT_SEC, n);
}

/** Rows sorted by `score` descending (stable), the first `limit`, mapped to title/url/description/position. */
export function searxngRows(results: unknown, limit: number): ReturnType<typeof searchOk> {
  const raw = Array.isArray(results) ? results.filter((r): r is Record<string, unknown> => typeof r === 'object' && r !== null) : [];
  const score = (r: Record<string, unknown>) => {
    const n = Number(r.score ?? 0);
    return Number.isFinite(n) ? n : 0;
  };
  const sorted = raw.map((r, i) => ({ r, i })).sort((a, b) => score(b.r) - score(a.r) || a.i - b.i).slice(0, limit);
  return searchOk(sorted.map(({ r }, i) => ({ title: text(r.title), url: text(r.url), description: text(r.content), position: i + 1 })));
}

export class SearxngProvider implements WebProvider {
  readonly name = 'searxng';
  readonly displayName = 'SearXNG';
  readonly envVars = ['SEARXNG_URL'] as const;
  readonly #env: ProviderEnv;

  constructor(env: ProviderEnv) {
    this.#env = env;
  }

  isAvailable(): boolean {
    return this.#env('SEARXNG_URL') !== '';
  }

  unavailableReason(): string {
    return this.isAvailable() ? '' : 'SEARXNG_URL is not set';
  }

  supportsSearch(): boolean {
    return true;
  }

  supportsExtract(): boolean {
    return false;
  }

  async search(query: string, limit: number, signal: AbortSignal): Promise<SearchResult> {
    const baseUrl = this.#env('SEARXNG_URL').replace(/\/+$/, '');
    if (baseUrl === '') return searchFail('SEARXNG_URL is not set');
    try {
      const url = new URL(`${baseUrl}/search`);
      url.searchParams.set('q', query);
      url.searchParams.set('format', 'json');
      url.searchParams.set('pageno', '1');
      const data = await requestJson({
        label: 'SearXNG',
        reachTarget: `SearXNG at ${baseUrl}`,
        url: url.toString(),
        method: 'GET',
        headers: { Accept: 'application/json' },
        timeoutMs: searxngTimeoutSec(this.#env('SEARXNG_TIMEOUT')) * 1000,
        signal,
      });
      const results = typeof data === 'object' && data !== null ? (data as { results?: unknown }).results : undefined;
      return searxngRows(results, limit);
    } catch (err) {
      if (err instanceof ProviderHttpError) return searchFail(err.message);
      if (err instanceof TypeError) return searchFail(`Could not reach SearXNG at ${baseUrl}: ${err.message}`);
      throw err;
    }
  }

  extract(urls: readonly string[]): Promise<ExtractedPage[]> {
    return Promise.resolve(urls.map((url) => ({ url, title: '', content: '', error: 'SearXNG does not extract pages' })));
  }
}
