/**
 * web_search and web_extract through the registry's dispatch path, against
 * stand-in servers on loopback: a SearXNG instance, a Tavily-shaped API and
 * plain web pages (redirects, huge and compressed bodies, slow answers,
 * non-HTML). Blocked fetches are checked to be refused before connecting: the
 * stand-in that would have served them records no request.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import { parseConfig } from '../../services/common/config-load.js';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskClient } from '../../services/common/task-client.js';
import { ToolRegistry } from '../../services/dispatcher/registry/registry.js';
import { registerBuiltinTools } from '../../services/dispatcher/tools/builtin-tools.js';
import type { ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import { BLOCKED_URL_ERROR, FetchFailedError, safeFetch, type Resolver } from '../../services/dispatcher/tools/web/safe-fetch.js';
import { parseCidr } from '../../services/common/cidr.js';
import { createTestPki } from '../support/test-pki.js';
import { sendJson, startHttpStandIn, type HttpStandIn } from '../support/http-stand-in.js';

function context(signal: AbortSignal = new AbortController().signal): ToolContext {
  // The web tools never touch the task's environment.
  return { tenant: 'default', taskId: 't1', sessionId: 's1', task: {} as TaskClient, signal, logger: silentLogger() };
}

interface Setup {
  readonly web?: Record<string, unknown>;
  readonly env?: NodeJS.ProcessEnv;
  readonly resolve?: Resolver;
}

function registryWith(setup: Setup): ToolRegistry {
  const registry = new ToolRegistry({ logger: silentLogger() });
  registerBuiltinTools(registry, parseConfig({ web: setup.web ?? {} }), {
    env: setup.env ?? {},
    ...(setup.resolve ? { resolve: setup.resolve } : {}),
  });
  return registry;
}

async function call(registry: ToolRegistry, tool: string, args: unknown, signal?: AbortSignal): Promise<string> {
  return registry.dispatch(tool, args, context(signal));
}

interface ExtractResult {
  results: { url: string; title: string; content: string; error: string | null }[];
}

describe('web_search via SearXNG', () => {
  let searxng: HttpStandIn;
  before(async () => {
    searxng = await startHttpStandIn();
  });
  after(() => searxng.close());

  it('asks /search?q=...&format=json&pageno=1 and answers rows sorted by score, title first, 1-based', async () => {
    searxng.handle((_req, res) =>
      sendJson(res, {
        results: [
          { title: 'low', url: 'https://a.example/low', content: 'low score', score: 0.5 },
          { title: 'high', url: 'https://a.example/high', content: 'high score', score: 3 },
          { title: 42, url: 'https://a.example/n', score: 1 },
        ],
      }),
    );
    const registry = registryWith({ env: { SEARXNG_URL: `${searxng.baseUrl}/` } });
    const result = await call(registry, 'web_search', { query: 'berth sandboxes' });
    assert.equal(
      result,
      JSON.stringify(
        {
          success: true,
          data: {
            web: [
              { title: 'high', url: 'https://a.example/high', description: 'high score', position: 1 },
              { title: '42', url: 'https://a.example/n', description: '', position: 2 },
              { title: 'low', url: 'https://a.example/low', description: 'low score', position: 3 },
            ],
          },
        },
        null,
        2,
      ),
    );
    const request = searxng.requests.at(-1)!;
    assert.equal(request.method, 'GET');
    assert.equal(request.url, '/search?q=berth+sandboxes&format=json&pageno=1');
    assert.equal(request.headers.accept, 'application/json');
  });

  it('keeps the first `limit` rows (execute_code sends limit; the model schema does not have it)', async () => {
    const rows = Array.from({ length: 12 }, (_, i) => ({ title: `t${i}`, url: `https://a.example/${i}`, content: '', score: 12 - i }));
    searxng.handle((_req, res) => sendJson(res, { results: rows }));
    const registry = registryWith({ env: { SEARXNG_URL: searxng.baseUrl } });
    const byDefault = JSON.parse(await call(registry, 'web_search', { query: 'q' })) as { data: { web: unknown[] } };
    assert.equal(byDefault.data.web.length, 5);
    const two = JSON.parse(await call(registry, 'web_search', { query: 'q', limit: 2 })) as { data: { web: { title: string }[] } };
    assert.deepEqual(two.data.web.map((r) => r.title), ['t0', 't1']);
  });

  it('reports HTTP errors, bodies that are not JSON, and an unreachable instance with upstream texts', async () => {
    const registry = registryWith({ env: { SEARXNG_URL: searxng.baseUrl } });
    searxng.handle((_req, res) => void res.writeHead(502).end('bad gateway'));
    assert.deepEqual(JSON.parse(await call(registry, 'web_search', { query: 'q' })), { success: false, error: 'SearXNG returned HTTP 502' });
    searxng.handle((_req, res) => void res.writeHead(200, { 'content-type': 'text/html' }).end('<html>captcha</html>'));
    assert.deepEqual(JSON.parse(await call(registry, 'web_search', { query: 'q' })), {
      success: false,
      error: 'Could not parse SearXNG response as JSON',
    });

    const gone = await startHttpStandIn();
    const goneUrl = gone.baseUrl;
    await gone.close();
    const unreachable = registryWith({ env: { SEARXNG_URL: goneUrl } });
    const failed = JSON.parse(await call(unreachable, 'web_search', { query: 'q' })) as { success: boolean; error: string };
    assert.equal(failed.success, false);
    assert.match(failed.error, new RegExp(`^Could not reach SearXNG at ${goneUrl.replace(/\./g, '\\.')}: .*ECONNREFUSED`));
  });

  it('answers Interrupted when the call is interrupted while SearXNG is slow', async () => {
    searxng.handle(() => undefined); // never answers
    const registry = registryWith({ env: { SEARXNG_URL: searxng.baseUrl } });
    const interrupt = new AbortController();
    const before = searxng.requests.length;
    const pending = call(registry, 'web_search', { query: 'q' }, interrupt.signal);
    while (searxng.requests.length === before) await new Promise((r) => setTimeout(r, 10));
    interrupt.abort();
    assert.deepEqual(JSON.parse(await pending), { success: false, error: 'Interrupted' });
  });
});

describe('web_search and web_extract via a Tavily-shaped API', () => {
  let tavily: HttpStandIn;
  before(async () => {
    tavily = await startHttpStandIn((req, res) => {
      const body = JSON.parse(req.body) as { api_key?: string; urls?: string[] };
      if (body.api_key !== 'tvly-test') return sendJson(res, { detail: 'unauthorized' }, 401);
      if (req.url === '/search') {
        return sendJson(res, {
          results: [
            { title: 'One', url: 'https://one.example/', content: 'first', score: 0.9, raw_content: null },
            { title: 'Two', url: 'https://two.example/', content: 'second', score: 0.8 },
          ],
        });
      }
      if (req.url === '/extract') {
        const [first, second, third] = body.urls ?? [];
        return sendJson(res, {
          results: [{ url: first, title: 'Page one', raw_content: 'x'.repeat(20_000) + 'THE END' }],
          failed_results: second === undefined ? [] : [{ url: second, error: 'robots.txt disallows' }],
          failed_urls: third === undefined ? [] : [third],
        });
      }
      return sendJson(res, { detail: 'not found' }, 404);
    });
  });
  after(() => tavily.close());

  const env = () => ({ TAVILY_API_KEY: 'tvly-test', TAVILY_API_URL: tavily.baseUrl });

  it('POSTs /search with api_key in the JSON body and maps results[].title/url/content', async () => {
    const registry = registryWith({ env: env() });
    const result = JSON.parse(await call(registry, 'web_search', { query: 'grpc', limit: 50 }));
    assert.deepEqual(result, {
      success: true,
      data: {
        web: [
          { title: 'One', url: 'https://one.example/', description: 'first', position: 1 },
          { title: 'Two', url: 'https://two.example/', description: 'second', position: 2 },
        ],
      },
    });
    const request = tavily.requests.at(-1)!;
    assert.equal(request.method, 'POST');
    assert.equal(request.headers.authorization, undefined);
    const sent = JSON.parse(request.body) as Record<string, unknown>;
    assert.equal(sent.api_key, 'tvly-test');
    assert.equal(sent.query, 'grpc');
    assert.equal(sent.max_results, 20, 'vendors cap results at 20');
  });

  it('says "Tavily returned HTTP 401" for a rejected key, never echoing the key', async () => {
    const registry = registryWith({ env: { TAVILY_API_KEY: 'wrong-key', TAVILY_API_URL: tavily.baseUrl } });
    const result = await call(registry, 'web_search', { query: 'q' });
    assert.deepEqual(JSON.parse(result), { success: false, error: 'Tavily returned HTTP 401' });
    assert.doesNotMatch(result, /wrong-key/);
  });

  it('extracts pages as {"results": [{url, title, content, error}]}, failures as entries, content cut at char_limit', async () => {
    const registry = registryWith({ env: env() });
    const urls = ['http://93.184.216.34/one', 'http://93.184.216.34/two', 'http://93.184.216.34/three'];
    const result = JSON.parse(await call(registry, 'web_extract', { urls, char_limit: 3000 })) as ExtractResult;
    assert.deepEqual(Object.keys(result.results[0]!), ['url', 'title', 'content', 'error']);
    assert.equal(result.results[0]!.title, 'Page one');
    assert.equal(result.results[0]!.error, null);
    const content = result.results[0]!.content;
    assert.ok(content.startsWith('x'.repeat(2000)));
    assert.ok(content.endsWith('THE END'), 'the tail survives head+tail truncation');
    assert.match(content, /\[\.\.\. 17007 characters omitted from the middle of this page \(20007 total; char_limit 3000\) \.\.\.\]/);
    assert.deepEqual(result.results.slice(1), [
      { url: urls[1], title: '', content: '', error: 'robots.txt disallows' },
      { url: urls[2], title: '', content: '', error: 'extraction failed' },
    ]);
    assert.deepEqual((JSON.parse(tavily.requests.at(-1)!.body) as { urls: string[] }).urls, urls);
  });

  it('never hands a private or loopback URL to the provider', async () => {
    const registry = registryWith({ env: env() });
    const before = tavily.requests.length;
    const result = JSON.parse(
      await call(registry, 'web_extract', { urls: ['http://169.254.169.254/latest/meta-data/', 'http://[::ffff:10.0.0.1]/', 'http://93.184.216.34/one'] }),
    ) as ExtractResult;
    assert.deepEqual(
      result.results.map((r) => [r.url, r.error]),
      [
        ['http://169.254.169.254/latest/meta-data/', BLOCKED_URL_ERROR],
        ['http://[::ffff:10.0.0.1]/', BLOCKED_URL_ERROR],
        ['http://93.184.216.34/one', null],
      ],
    );
    assert.equal(tavily.requests.length, before + 1);
    assert.deepEqual((JSON.parse(tavily.requests.at(-1)!.body) as { urls: string[] }).urls, ['http://93.184.216.34/one']);
  });
});

describe('web_extract via the http provider', () => {
  let site: HttpStandIn;
  /** Listens on another loopback address that the allowlist does not open: it must never be reached. */
  let forbidden: HttpStandIn;

  const PAGE = `<!doctype html><html><head><title>Berth &amp; friends</title><style>p{}</style>
<script>var secret = "not content";</script></head>
<body><nav><a href="/">Home</a></nav>
<main><h1>Sandboxes</h1><p>Berth runs <b>tool calls</b> in <a href="/docs">sandboxes</a>.</p>
<ul><li>docker</li><li>ssh</li></ul><pre>make test</pre></main>
<footer>copyright</footer></body></html>`;

  before(async () => {
    site = await startHttpStandIn((req, res) => {
      const send = (type: string, body: string | Buffer, headers: Record<string, string> = {}) =>
        void res.writeHead(200, { 'content-type': type, ...headers }).end(body);
      switch (req.url) {
        case '/page':
          return send('text/html; charset=utf-8', PAGE);
        case '/hop1':
          return void res.writeHead(302, { location: '/hop2' }).end();
        case '/hop2':
          return void res.writeHead(301, { location: `${site.baseUrl}/page` }).end();
        case '/loop':
          return void res.writeHead(302, { location: '/loop' }).end();
        case '/to-forbidden':
          return void res.writeHead(302, { location: `${forbidden.baseUrl}/secret` }).end();
        case '/to-metadata':
          return void res.writeHead(307, { location: 'http://169.254.169.254/latest/meta-data/' }).end();
        case '/text':
          return send('text/plain', 'A'.repeat(10_000) + 'B'.repeat(10_000) + 'C'.repeat(10_000));
        case '/pdf':
          return send('application/pdf', Buffer.from('%PDF-1.7 binary'));
        case '/missing':
          return void res.writeHead(404, { 'content-type': 'text/html' }).end('<h1>Not found</h1>');
        case '/huge': {
          // 8 MiB of text: more than a page is read.
          res.writeHead(200, { 'content-type': 'text/plain' });
          const chunk = 'y'.repeat(64 * 1024);
          let sent = 0;
          const more = () => {
            while (sent < 128) {
              sent += 1;
              if (!res.write(chunk)) return void res.once('drain', more);
            }
            res.end();
          };
          res.on('error', () => undefined);
          return more();
        }
        case '/bomb':
          // 64 MiB of zeros, gzipped to a few KiB: the cap counts decoded bytes.
          return send('text/plain', gzipSync(Buffer.alloc(64 * 1024 * 1024)), { 'content-encoding': 'gzip' });
        case '/slow':
          return undefined; // headers never come
        default:
          return void res.writeHead(404).end();
      }
    });
    forbidden = await startHttpStandIn((_req, res) => void res.writeHead(200, { 'content-type': 'text/plain' }).end('internal secret'), '127.0.0.2');
  });
  after(async () => {
    await site.close();
    await forbidden.close();
  });

  /** The http extractor with loopback 127.0.0.1 opened (only there do the tests' pages live). */
  const allowed = (extra: Record<string, unknown> = {}, resolve?: Resolver) =>
    registryWith({ web: { extract_backend: 'http', egress_allow: ['127.0.0.1/32'], ...extra }, ...(resolve ? { resolve } : {}) });

  async function extract(registry: ToolRegistry, urls: string[], extraArgs: Record<string, unknown> = {}, signal?: AbortSignal) {
    return JSON.parse(await call(registry, 'web_extract', { urls, ...extraArgs }, signal)) as ExtractResult;
  }

  it('turns an HTML page into its title and readable markdown (scripts, styles, nav and footer dropped)', async () => {
    const { results } = await extract(allowed(), [`${site.baseUrl}/page`]);
    assert.deepEqual(results, [
      {
        url: `${site.baseUrl}/page`,
        title: 'Berth & friends',
        content: `# Sandboxes\n\nBerth runs **tool calls** in [sandboxes](${site.baseUrl}/docs).\n\n- docker\n- ssh\n\n\`\`\`\nmake test\n\`\`\``,
        error: null,
      },
    ]);
  });

  it('follows redirects (relative and absolute) and reports the final URL', async () => {
    const { results } = await extract(allowed(), [`${site.baseUrl}/hop1`]);
    assert.equal(results[0]!.url, `${site.baseUrl}/page`);
    assert.equal(results[0]!.title, 'Berth & friends');
  });

  it('stops a redirect loop after 5 hops', async () => {
    const { results } = await extract(allowed(), [`${site.baseUrl}/loop`]);
    assert.equal(results[0]!.error, `Too many redirects (more than 5) from ${site.baseUrl}/loop`);
  });

  it('refuses loopback without an allowlist entry, before connecting', async () => {
    const registry = registryWith({ web: { extract_backend: 'http' } });
    const before = site.requests.length;
    const { results } = await extract(registry, [`${site.baseUrl}/page`, `http://localhost:${site.port}/page`]);
    assert.deepEqual(results.map((r) => r.error), [BLOCKED_URL_ERROR, BLOCKED_URL_ERROR]);
    assert.equal(site.requests.length, before, 'the page server received no request');
  });

  it('re-checks every redirect hop: a public page cannot bounce the fetch to an internal one', async () => {
    const { results } = await extract(allowed(), [`${site.baseUrl}/to-forbidden`, `${site.baseUrl}/to-metadata`]);
    assert.deepEqual(results.map((r) => r.error), [BLOCKED_URL_ERROR, BLOCKED_URL_ERROR]);
    assert.equal(forbidden.requests.length, 0, 'the internal server received no request');
  });

  it('refuses a name whose addresses include a private one, and connects to the checked address only', async () => {
    const resolve: Resolver = (host) =>
      Promise.resolve(
        host === 'mixed.test'
          ? [{ address: '93.184.216.34', family: 4 }, { address: '10.1.2.3', family: 4 }]
          : [{ address: '127.0.0.1', family: 4 }],
      );
    const registry = allowed({}, resolve);
    const { results } = await extract(registry, [`http://mixed.test:${site.port}/page`, `http://pinned.test:${site.port}/page`]);
    assert.equal(results[0]!.error, BLOCKED_URL_ERROR);
    // pinned.test exists only in the injected resolver: the socket went to the address that was checked.
    assert.equal(results[1]!.error, null);
    assert.equal(results[1]!.title, 'Berth & friends');
    assert.equal(site.requests.at(-1)!.headers.host, `pinned.test:${site.port}`);
  });

  it('refuses schemes other than http and https', async () => {
    const { results } = await extract(allowed(), ['file:///etc/passwd', 'ftp://127.0.0.1/x']);
    assert.deepEqual(results.map((r) => r.error), [
      'Only http and https URLs can be fetched, not file',
      'Only http and https URLs can be fetched, not ftp',
    ]);
  });

  it('passes plain text through and cuts it to head and tail at char_limit (default 15000)', async () => {
    const [page] = (await extract(allowed(), [`${site.baseUrl}/text`])).results;
    assert.equal(page!.error, null);
    assert.ok(page!.content.startsWith('A'.repeat(10_000)));
    assert.ok(page!.content.endsWith('C'.repeat(5_000)));
    assert.match(page!.content, /\[\.\.\. 15000 characters omitted from the middle of this page \(30000 total; char_limit 15000\) \.\.\.\]/);
    const [small] = (await extract(allowed(), [`${site.baseUrl}/text`], { char_limit: 100 })).results;
    assert.match(small!.content, /char_limit 2000\)/, 'char_limit has a floor of 2000');
  });

  it('refuses non-text content types and reports HTTP errors per page', async () => {
    const { results } = await extract(allowed(), [`${site.baseUrl}/pdf`, `${site.baseUrl}/missing`]);
    assert.deepEqual(results.map((r) => r.error), [
      'Unsupported content type application/pdf: only HTML and text pages can be extracted',
      `${site.baseUrl}/missing returned HTTP 404`,
    ]);
  });

  it('reads at most 5 MiB of a huge page, and of a compressed one once decoded', async () => {
    for (const path of ['/huge', '/bomb']) {
      // Head+tail truncation keeps the note at the end of the cut page.
      const [page] = (await extract(allowed(), [`${site.baseUrl}${path}`])).results;
      assert.equal(page!.error, null, path);
      assert.match(page!.content, /\[Page cut at 5242880 bytes: it is larger than Berth reads\]$/, path);
    }
  });

  it('gives up on a page that does not answer within web.timeout', async () => {
    const { results } = await extract(allowed({ timeout: 1 }), [`${site.baseUrl}/slow`]);
    assert.equal(results[0]!.error, `Could not reach ${site.baseUrl}/slow: timed out after 1s`);
  });

  it('marks pages Interrupted when the call is interrupted', async () => {
    const interrupt = new AbortController();
    const requestsBefore = site.requests.length;
    const pending = extract(allowed(), [`${site.baseUrl}/slow`, `${site.baseUrl}/page`], {}, interrupt.signal);
    while (site.requests.length === requestsBefore) await new Promise((r) => setTimeout(r, 10));
    interrupt.abort();
    const { results } = await pending;
    assert.deepEqual(results.map((r) => r.error), ['Interrupted', 'Interrupted']);
  });

  it('takes the first 5 URLs; none at all is "Content was inaccessible or not found"', async () => {
    const urls = Array.from({ length: 7 }, (_, i) => `${site.baseUrl}/page?i=${i}`);
    const { results } = await extract(allowed(), urls);
    assert.equal(results.length, 5);
    assert.equal(await call(allowed(), 'web_extract', { urls: [] }), JSON.stringify({ error: 'Content was inaccessible or not found' }));
  });
});

describe('safeFetch over https', () => {
  it('connects to the checked address but verifies the certificate for the URL host name', async () => {
    using pki = createTestPki();
    const cert = pki.serverCert('page');
    const server = createHttpsServer({ cert: readFileSync(cert.certFile), key: readFileSync(cert.keyFile) }, (_req, res) =>
      void res.writeHead(200, { 'content-type': 'text/plain' }).end('over tls'),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      const options = {
        allow: [parseCidr('127.0.0.1/32')!],
        timeoutMs: 10_000,
        maxBytes: 1024,
        signal: new AbortController().signal,
        ca: readFileSync(pki.ca.certFile, 'utf8'),
        // "localhost" is in the certificate; the resolver is the only place it maps to an address.
        resolve: (() => Promise.resolve([{ address: '127.0.0.1', family: 4 }])) as Resolver,
      };
      const page = await safeFetch(`https://localhost:${port}/`, options);
      assert.equal(page.body.toString(), 'over tls');
      // A name the certificate does not carry fails verification even though the address is the same.
      await assert.rejects(safeFetch(`https://elsewhere.test:${port}/`, options), (err: Error) => {
        assert.ok(err instanceof FetchFailedError);
        assert.match(err.message, /^Could not reach https:\/\/elsewhere\.test:\d+\/: .*(altnames|certificate)/i);
        return true;
      });
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
