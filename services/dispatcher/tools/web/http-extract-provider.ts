/**
 * The keyless extractor: the dispatcher fetches each page itself (safe-fetch:
 * public addresses only, redirects re-checked, deadline, size cap) and turns
 * HTML into readable markdown; plain text, markdown and JSON pass as text.
 * Other content types (PDF, images, archives) are refused by name.
 */
import type { Cidr } from '../../../common/cidr.js';
import { htmlToReadableText } from './readable-text.js';
import { BlockedUrlError, FetchFailedError, safeFetch, type FetchedPage, type Resolver } from './safe-fetch.js';
import { INTERRUPTED, pageError, type ExtractedPage, type SearchResult, type WebProvider } from './web-provider.js';

/** Bytes of one page read at most (decoded); the rest of a larger page is not fetched. */
export const MAX_PAGE_BYTES = 5 * 1024 * 1024;

const TEXT_TYPES = new Set(['text/plain', 'text/markdown', 'text/x-markdown', 'application/json', 'text/csv', 'application/xml', 'text/xml']);
const HTML_TYPES = new Set(['text/html', 'application/xhtml+xml']);

export interface HttpExtractOptions {
  readonly allow: readonly Cidr[];
  readonly timeoutMs: number;
  readonly maxBytes?: number;
  /** Name resolution; tests inject one. */
  readonly resolve?: Resolver;
}

/** The charset named by a Content-Type header or an HTML meta tag near the top; utf-8 otherwise. */
function charsetOf(contentType: string, body: Buffer): string {
  const fromHeader = /charset\s*=\s*"?([A-Za-z0-9_.:-]+)/i.exec(contentType)?.[1];
  const fromMeta = /<meta[^>]{0,200}charset\s*=\s*["']?([A-Za-z0-9_.:-]+)/i.exec(body.subarray(0, 2048).toString('latin1'))?.[1];
  return (fromHeader ?? fromMeta ?? 'utf-8').toLowerCase();
}

function decodeBody(page: FetchedPage): string {
  try {
    return new TextDecoder(charsetOf(page.contentType, page.body)).decode(page.body);
  } catch {
    // An unknown charset name: utf-8 is the web's default.
    return new TextDecoder('utf-8').decode(page.body);
  }
}

/** Whether a body with no usable Content-Type looks like HTML. */
function sniffHtml(body: Buffer): boolean {
  return /^\s*(<!doctype html|<html|<head|<body|<!--)/i.test(body.subarray(0, 512).toString('latin1'));
}

/** A fetched page as an extract entry: readable text, or why there is none. */
export function pageFromResponse(requestedUrl: string, page: FetchedPage): ExtractedPage {
  if (page.status >= 400) return pageError(requestedUrl, `${page.url} returned HTTP ${page.status}`);
  const mime = page.contentType.split(';')[0]!.trim().toLowerCase();
  const note = page.truncated ? `\n\n[Page cut at ${page.body.length} bytes: it is larger than Berth reads]` : '';
  if (HTML_TYPES.has(mime) || ((mime === '' || mime === 'application/octet-stream') && sniffHtml(page.body))) {
    const { title, markdown } = htmlToReadableText(decodeBody(page), page.url);
    return { url: page.url, title, content: markdown + note };
  }
  if (TEXT_TYPES.has(mime) || mime.startsWith('text/') || mime.endsWith('+json') || (mime === '' && !page.body.includes(0))) {
    return { url: page.url, title: '', content: decodeBody(page) + note };
  }
  return pageError(requestedUrl, `Unsupported content type ${mime}: only HTML and text pages can be extracted`);
}

export class HttpExtractProvider implements WebProvider {
  readonly name = 'http';
  readonly displayName = 'HTTP';
  readonly envVars = [] as const;
  readonly #options: HttpExtractOptions;

  constructor(options: HttpExtractOptions) {
    this.#options = options;
  }

  isAvailable(): boolean {
    return true;
  }

  unavailableReason(): string {
    return '';
  }

  supportsSearch(): boolean {
    return false;
  }

  supportsExtract(): boolean {
    return true;
  }

  search(): Promise<SearchResult> {
    return Promise.resolve({ success: false, error: 'The http provider does not search' });
  }

  /** Pages are fetched one after another (at most 5 per call), so one call opens one connection at a time. */
  async extract(urls: readonly string[], signal: AbortSignal): Promise<ExtractedPage[]> {
    const pages: ExtractedPage[] = [];
    for (const url of urls) {
      if (signal.aborted) {
        pages.push({ url, title: '', content: '', error: INTERRUPTED });
        continue;
      }
      try {
        const page = await safeFetch(url, {
          allow: this.#options.allow,
          timeoutMs: this.#options.timeoutMs,
          maxBytes: this.#options.maxBytes ?? MAX_PAGE_BYTES,
          signal,
          ...(this.#options.resolve ? { resolve: this.#options.resolve } : {}),
        });
        pages.push(pageFromResponse(url, page));
      } catch (err) {
        if (err instanceof BlockedUrlError || err instanceof FetchFailedError) pages.push(pageError(url, err.message));
        else if (signal.aborted) pages.push({ url, title: '', content: '', error: INTERRUPTED });
        else throw err;
      }
    }
    return pages;
  }
}
