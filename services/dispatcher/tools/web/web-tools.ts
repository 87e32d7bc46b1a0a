/**
 * The `web_search` and `web_extract` tools (toolset `web`). Model schemas as
 * upstream's: `query` only, `urls` only (at most 5); the handlers also take
 * `limit` and `char_limit`, which `hermes_tools` scripts send. Each tool is
 * listed only while a provider for it is configured and available (its
 * check function), and says why not to `berth tools --explain`.
 */
import type { ToolContext, ToolRegistration, ToolSchema } from '../../registry/tool-types.js';
import { BlockedUrlError, checkedAddress, FetchFailedError, type Resolver } from './safe-fetch.js';
import type { WebBackends, WebCapability } from './web-backends.js';
import { INTERRUPTED, searchFail, type ExtractedPage, type SearchResult } from './web-provider.js';
import { parseCidr, type Cidr } from '../../../common/cidr.js';

export const DEFAULT_SEARCH_LIMIT = 5;
export const MAX_SEARCH_LIMIT = 100;
export const MAX_EXTRACT_URLS = 5;
export const DEFAULT_CHAR_LIMIT = 15_000;
export const MIN_CHAR_LIMIT = 2_000;
export const NO_CONTENT_ERROR = 'Content was inaccessible or not found';

export const WEB_SEARCH_SCHEMA: ToolSchema = {
  name: 'web_search',
  description:
    'Search the web for information on any topic. Returns up to 5 relevant results with titles, URLs, and descriptions.',
  parameters: {
    type: 'object',
    properties: { query: { type: 'string', description: 'The search query to look up on the web' } },
    required: ['query'],
  },
};

export const WEB_EXTRACT_SCHEMA: ToolSchema = {
  name: 'web_extract',
  description:
    'Extract content from web page URLs. Returns page content in markdown format. Pages over 15000 characters ' +
    'keep their beginning and end, with a note of how much was cut from the middle. Only public addresses can ' +
    'be fetched. If a URL fails or times out, use the browser tool to access it instead.',
  parameters: {
    type: 'object',
    properties: {
      urls: {
        type: 'array',
        items: { type: 'string' },
        description: 'List of URLs to extract content from (max 5 URLs per call)',
        maxItems: MAX_EXTRACT_URLS,
      },
    },
    required: ['urls'],
  },
};

/** An integer argument from a script (`limit`, `char_limit`), clamped; the default when absent or not a number. */
function intArg(value: unknown, fallback: number, min: number, max: number): number {
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isFinite(n)) return fallback;
  return Math.min(max, Math.max(min, Math.trunc(n)));
}

/**
 * Cuts `content` longer than `charLimit` to its head and tail (two thirds and
 * one third of the limit) around a note saying how much was left out, so
 * both a page's opening and its conclusion survive.
 */
export function truncateHeadTail(content: string, charLimit: number): string {
  if (content.length <= charLimit) return content;
  let headEnd = Math.floor((charLimit * 2) / 3);
  let tailStart = content.length - (charLimit - headEnd);
  // Never split a surrogate pair.
  if (/[\uD800-\uDBFF]/.test(content[headEnd - 1] ?? '')) headEnd -= 1;
  if (/[\uDC00-\uDFFF]/.test(content[tailStart] ?? '')) tailStart += 1;
  const omitted = tailStart - headEnd;
  return (
    `${content.slice(0, headEnd)}\n\n[... ${omitted} characters omitted from the middle of this page ` +
    `(${content.length} total; char_limit ${charLimit}) ...]\n\n${content.slice(tailStart)}`
  );
}

function isAbort(err: unknown, context: ToolContext): boolean {
  return context.signal.aborted || (err instanceof Error && err.name === 'AbortError');
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export interface WebToolsOptions {
  readonly backends: WebBackends;
  /** `web.egress_allow`, for the address check done before a keyed provider is handed a URL. */
  readonly egressAllow: readonly string[];
  /** Name resolution for that check; tests inject one. */
  readonly resolve?: Resolver;
}

/** The check function and explanation of one capability, from the live selection. */
function availability(backends: WebBackends, capability: WebCapability) {
  return {
    checkFn: () => backends.select(capability).provider !== undefined,
    explainUnavailable: () => backends.select(capability).reason ?? '',
    requiresEnv: backends.select(capability).envVars,
  };
}

export function webToolRegistrations(options: WebToolsOptions): ToolRegistration[] {
  const { backends } = options;
  const allow: Cidr[] = options.egressAllow.map((c) => parseCidr(c)!);

  const search: ToolRegistration = {
    name: 'web_search',
    toolset: 'web',
    schema: WEB_SEARCH_SCHEMA,
    emoji: '🔍',
    ...availability(backends, 'search'),
    handler: async (args, context) => {
      const selection = backends.select('search');
      if (selection.provider === undefined) return JSON.stringify(searchFail(selection.reason), null, 2);
      const query = typeof args.query === 'string' ? args.query : '';
      const limit = intArg(args.limit, DEFAULT_SEARCH_LIMIT, 1, MAX_SEARCH_LIMIT);
      if (context.signal.aborted) return JSON.stringify(searchFail(INTERRUPTED), null, 2);
      let result: SearchResult;
      try {
        result = await selection.provider.search(query, limit, context.signal);
      } catch (err) {
        if (isAbort(err, context)) return JSON.stringify(searchFail(INTERRUPTED), null, 2);
        context.logger.warn({ err, provider: selection.provider.name }, 'web search failed');
        return JSON.stringify({ error: `Error searching web: ${errorText(err)}` });
      }
      return JSON.stringify(result, null, 2);
    },
  };

  const extract: ToolRegistration = {
    name: 'web_extract',
    toolset: 'web',
    schema: WEB_EXTRACT_SCHEMA,
    emoji: '📄',
    ...availability(backends, 'extract'),
    handler: async (args, context) => {
      const selection = backends.select('extract');
      const urls = (Array.isArray(args.urls) ? args.urls : [])
        .filter((u): u is string => typeof u === 'string')
        .slice(0, MAX_EXTRACT_URLS);
      if (urls.length === 0) return JSON.stringify({ error: NO_CONTENT_ERROR });
      if (selection.provider === undefined) {
        return JSON.stringify({ results: urls.map((url) => ({ url, title: '', content: '', error: selection.reason })) }, null, 2);
      }
      const provider = selection.provider;
      const charLimit = intArg(args.char_limit, DEFAULT_CHAR_LIMIT, MIN_CHAR_LIMIT, Number.MAX_SAFE_INTEGER);
      let pages: ExtractedPage[];
      try {
        // A keyed provider fetches from its own network, but is still not handed internal addresses;
        // the http provider checks every hop itself while fetching.
        const blocked: ExtractedPage[] = [];
        let allowed = urls;
        if (provider.name !== 'http') {
          const verdicts = await Promise.all(urls.map((url) => urlVerdict(url, allow, options.resolve)));
          blocked.push(...urls.flatMap((url, i) => (verdicts[i] === undefined ? [] : [{ url, title: '', content: '', error: verdicts[i]! }])));
          allowed = urls.filter((_, i) => verdicts[i] === undefined);
        }
        if (context.signal.aborted) {
          pages = [...blocked, ...allowed.map((url) => ({ url, title: '', content: '', error: INTERRUPTED }))];
        } else {
          pages = [...blocked, ...(allowed.length > 0 ? await provider.extract(allowed, context.signal) : [])];
        }
      } catch (err) {
        if (isAbort(err, context)) {
          pages = urls.map((url) => ({ url, title: '', content: '', error: INTERRUPTED }));
        } else {
          context.logger.warn({ err, provider: provider.name }, 'web extract failed');
          return JSON.stringify({ error: `Error extracting content: ${errorText(err)}` });
        }
      }
      if (pages.length === 0) return JSON.stringify({ error: NO_CONTENT_ERROR });
      const results = pages.map((p) => ({
        url: p.url,
        title: p.title,
        content: truncateHeadTail(p.content, charLimit),
        error: p.error ?? null,
      }));
      return JSON.stringify({ results }, null, 2);
    },
  };

  return [search, extract];
}

/** Why a URL may not be handed to a provider (upstream's blocked text, a bad URL); undefined when it may. */
async function urlVerdict(url: string, allow: readonly Cidr[], resolve: Resolver | undefined): Promise<string | undefined> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `Invalid URL: ${url}`;
  }
  try {
    await checkedAddress(parsed, allow, resolve);
    return undefined;
  } catch (err) {
    if (err instanceof BlockedUrlError) return err.message;
    // A name that does not resolve here may still resolve for the provider; only addresses we see are judged.
    if (err instanceof FetchFailedError) return undefined;
    throw err;
  }
}
