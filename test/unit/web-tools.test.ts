/**
 * Web tools without a network: which addresses count as public, readable
 * text from HTML, provider selection from config and environment, and what
 * listings and `berth tools --explain` show with and without a provider.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseCidr } from '../../services/common/cidr.js';
import { ConfigError } from '../../services/common/config.js';
import { parseConfig } from '../../services/common/config-load.js';
import { silentLogger } from '../../services/common/logging.js';
import { nonPublicRange } from '../../services/common/public-address.js';
import { executeCodeLimitsFromConfig, executeCodeSchemaPatcher } from '../../services/dispatcher/tools/code-execution/execute-code-tool.js';
import { ToolRegistry } from '../../services/dispatcher/registry/registry.js';
import { getToolDefinitions } from '../../services/dispatcher/registry/toolsets.js';
import { registerBuiltinTools } from '../../services/dispatcher/tools/builtin-tools.js';
import { decodeEntities, htmlToReadableText } from '../../services/dispatcher/tools/web/readable-text.js';
import { searxngRows, searxngTimeoutSec } from '../../services/dispatcher/tools/web/searxng-provider.js';
import { WebBackends } from '../../services/dispatcher/tools/web/web-backends.js';
import { truncateHeadTail, WEB_EXTRACT_SCHEMA, WEB_SEARCH_SCHEMA } from '../../services/dispatcher/tools/web/web-tools.js';

describe('nonPublicRange', () => {
  it('refuses private, loopback, link-local, shared, reserved and host addresses in both families', () => {
    const cases: [string, string][] = [
      ['10.1.2.3', '10.0.0.0/8'],
      ['127.0.0.1', '127.0.0.0/8'],
      ['169.254.169.254', '169.254.0.0/16'],
      ['100.64.0.1', '100.64.0.0/10'],
      ['172.31.255.255', '172.16.0.0/12'],
      ['192.168.1.1', '192.168.0.0/16'],
      ['0.0.0.0', '0.0.0.0/8'],
      ['240.0.0.1', '240.0.0.0/4'],
      ['255.255.255.255', '240.0.0.0/4'],
      ['224.0.0.251', '224.0.0.0/4'],
      ['198.18.0.1', '198.18.0.0/15'],
      ['::1', '::1/128'],
      ['::', '::/128'],
      ['fe80::1', 'fe80::/10'],
      ['fd00::1', 'fc00::/7'],
      ['ff02::1', 'ff00::/8'],
      ['2001:db8::1', '2001:db8::/32'],
      ['fe80::1%eth0', 'fe80::/10'],
      // IPv4 spelled as IPv6 is judged as the IPv4 address.
      ['::ffff:127.0.0.1', '127.0.0.0/8'],
      ['::ffff:a9fe:a9fe', '169.254.0.0/16'],
      ['64:ff9b::a00:1', '10.0.0.0/8'],
      ['[::1]', '::1/128'],
    ];
    for (const [address, range] of cases) assert.equal(nonPublicRange(address), range, address);
  });

  it('lets public addresses and allowlisted ranges through', () => {
    for (const address of ['93.184.216.34', '8.8.8.8', '2606:4700:4700::1111', '::ffff:8.8.8.8', '64:ff9b::808:808']) {
      assert.equal(nonPublicRange(address), undefined, address);
    }
    const allow = [parseCidr('127.0.0.1/32')!, parseCidr('10.20.0.0/16')!];
    assert.equal(nonPublicRange('127.0.0.1', allow), undefined);
    assert.equal(nonPublicRange('::ffff:127.0.0.1', allow), undefined);
    assert.equal(nonPublicRange('10.20.3.4', allow), undefined);
    assert.equal(nonPublicRange('127.0.0.2', allow), '127.0.0.0/8');
  });
});

describe('htmlToReadableText', () => {
  it('keeps headings, paragraphs, lists, links and code; drops scripts, styles and chrome', () => {
    const html = `<html><head><title> A &lt;title&gt; </title><script>alert(1)</script></head><body>
      <header>site</header><nav><ul><li>menu</li></ul></nav>
      <h2>Intro</h2><p>Some <em>text</em>&nbsp;and <code>code</code>.</p>
      <ol><li>one</li><li>two</li></ol>
      <p><a href="https://x.example/a?b=1&amp;c=2">link</a> <a href="javascript:alert(1)">js</a></p>
      <!-- a comment <p>hidden</p> -->
      <form><input value="x"><button>Go</button></form><footer>foot</footer></body></html>`;
    assert.deepEqual(htmlToReadableText(html), {
      title: 'A <title>',
      markdown: 'site\n\n## Intro\n\nSome _text_ and `code`.\n\n1. one\n2. two\n\n[link](https://x.example/a?b=1&c=2) js',
    });
  });

  it('prefers <main> or <article> and falls back to the first <h1> for the title', () => {
    const html = '<body><div>sidebar junk</div><article><h1>Title &amp; more</h1><p>Body</p></article></body>';
    assert.deepEqual(htmlToReadableText(html), { title: 'Title & more', markdown: '# Title & more\n\nBody' });
  });

  it('survives hostile markup: unclosed tags and quotes, stray <, deep nesting, raw-text end tags in any case', () => {
    // "< " is text; "<d" opens a tag that never closes, which (as in browsers) swallows the rest.
    assert.equal(htmlToReadableText('a < b and c<d').markdown, 'a < b and c');
    assert.equal(htmlToReadableText('<p>before</p><a href="never closed>after').markdown, 'before');
    assert.equal(htmlToReadableText('<SCRIPT>x()</sCrIpT><p>ok</p>').markdown, 'ok');
    const deep = '<div>'.repeat(50_000) + 'deep' + '</div>'.repeat(50_000);
    assert.equal(htmlToReadableText(deep).markdown, 'deep');
    // Many unclosed quotes must not make the scan quadratic: this finishes at once.
    assert.equal(htmlToReadableText('<p>x</p>' + '<a title="'.repeat(100_000)).markdown, 'x');
  });

  it('decodes numeric and named references, replacing invalid code points', () => {
    assert.equal(decodeEntities('&#65;&#x42;&amp;&unknown;&#0;&#xD800;'), 'AB&&unknown;\uFFFD\uFFFD');
  });
});

describe('provider pieces', () => {
  it('SEARXNG_TIMEOUT: default 15 s, floor 5 s, unparsable is the default', () => {
    assert.equal(searxngTimeoutSec(''), 15);
    assert.equal(searxngTimeoutSec('1'), 5);
    assert.equal(searxngTimeoutSec('30'), 30);
    assert.equal(searxngTimeoutSec('soon'), 15);
  });

  it('SearXNG rows: str() of every field, stable sort by score, non-objects skipped', () => {
    assert.deepEqual(searxngRows([{ title: 'a', score: 'x' }, 'junk', { title: 'b', url: null, content: ['c'], score: 1 }], 5), {
      success: true,
      data: {
        web: [
          { title: 'b', url: '', description: '["c"]', position: 1 },
          { title: 'a', url: '', description: '', position: 2 },
        ],
      },
    });
  });

  it('head+tail truncation keeps two thirds of the limit from the start and one third from the end', () => {
    const text = 'a'.repeat(3000) + 'b'.repeat(3000) + 'c'.repeat(3000);
    const cut = truncateHeadTail(text, 3000);
    assert.equal(
      cut,
      `${'a'.repeat(2000)}\n\n[... 6000 characters omitted from the middle of this page (9000 total; char_limit 3000) ...]\n\n${'c'.repeat(1000)}`,
    );
    assert.equal(truncateHeadTail('short', 3000), 'short');
  });
});

describe('provider selection', () => {
  const web = (keys: Record<string, unknown> = {}) => parseConfig({ web: keys }).web;

  it('with nothing configured, neither tool has a provider, and the reason names the variables', () => {
    const backends = new WebBackends(web(), { env: {} });
    assert.deepEqual(backends.select('search'), {
      reason: 'no web search provider: set TAVILY_API_KEY or SEARXNG_URL, or name one (searxng, tavily) in web.search_backend',
      envVars: ['TAVILY_API_KEY', 'SEARXNG_URL'],
    });
    assert.equal(backends.select('extract').reason, 'no web extract provider: set TAVILY_API_KEY, or name one (tavily, http) in web.extract_backend');
  });

  it('picks by the variables set (tavily before searxng) and only uses http when named', () => {
    assert.equal(new WebBackends(web(), { env: { SEARXNG_URL: 'http://127.0.0.1:1' } }).select('search').provider?.name, 'searxng');
    const both = new WebBackends(web(), { env: { SEARXNG_URL: 'http://127.0.0.1:1', TAVILY_API_KEY: 'k' } });
    assert.equal(both.select('search').provider?.name, 'tavily');
    assert.equal(both.select('extract').provider?.name, 'tavily');
    assert.equal(new WebBackends(web({ extract_backend: 'http' }), { env: {} }).select('extract').provider?.name, 'http');
  });

  it('web.backend applies to the capabilities its provider has; a capability key wins over it', () => {
    const searxng = new WebBackends(web({ backend: 'searxng' }), { env: { SEARXNG_URL: 'http://127.0.0.1:1', TAVILY_API_KEY: 'k' } });
    assert.equal(searxng.select('search').provider?.name, 'searxng');
    assert.equal(searxng.select('extract').provider?.name, 'tavily', 'searxng cannot extract: the automatic choice applies');
    const split = new WebBackends(web({ backend: 'tavily', search_backend: 'searxng' }), { env: { TAVILY_API_KEY: 'k' } });
    assert.equal(split.select('search').reason, 'web.search_backend is searxng, but SEARXNG_URL is not set');
    assert.equal(split.select('extract').provider?.name, 'tavily');
    assert.equal(
      new WebBackends(web({ backend: 'tavily' }), { env: { TAVILY_API_KEY: '  ' } }).select('search').reason,
      'web.backend is tavily, but TAVILY_API_KEY is not set',
    );
  });

  it('config refuses a provider for a capability it lacks and a malformed allowlist', () => {
    assert.throws(() => parseConfig({ web: { search_backend: 'http' } }), ConfigError);
    assert.throws(() => parseConfig({ web: { extract_backend: 'searxng' } }), ConfigError);
    assert.throws(() => parseConfig({ web: { egress_allow: ['intranet'] } }), ConfigError);
    assert.deepEqual(parseConfig({}).web, { backend: '', search_backend: '', extract_backend: '', egress_allow: [], timeout: 20 });
  });
});

describe('listings and --explain with and without a provider', () => {
  function listing(env: NodeJS.ProcessEnv, webKeys: Record<string, unknown> = {}) {
    const config = parseConfig({ web: webKeys });
    const registry = new ToolRegistry({ logger: silentLogger() });
    registerBuiltinTools(registry, config, { env });
    const patchers = { executeCode: executeCodeSchemaPatcher(executeCodeLimitsFromConfig(config)) };
    return { registry, list: () => getToolDefinitions(registry, {}, patchers) };
  }

  it('without a provider, ListTools omits both web tools and execute_code does not offer them', async () => {
    const { list, registry } = listing({});
    const { tools } = await list();
    const names = tools.map((t) => t.function.name);
    assert.ok(!names.includes('web_search') && !names.includes('web_extract'));
    const executeCode = tools.find((t) => t.function.name === 'execute_code')!;
    assert.doesNotMatch(executeCode.function.description, /web_search|web_extract/);
    const report = await registry.availabilityReport();
    assert.ok(!report.available.includes('web'));
    assert.deepEqual(
      report.unavailable.find((t) => t.name === 'web'),
      {
        name: 'web',
        env_vars: ['TAVILY_API_KEY', 'SEARXNG_URL'],
        tools: ['web_extract', 'web_search'],
        reason:
          'no web extract provider: set TAVILY_API_KEY, or name one (tavily, http) in web.extract_backend; ' +
          'no web search provider: set TAVILY_API_KEY or SEARXNG_URL, or name one (searxng, tavily) in web.search_backend',
      },
    );
    assert.ok(report.available.includes('terminal') && report.available.includes('file'));
  });

  it('with SearXNG only, web_search is listed with the upstream schema and web_extract stays out', async () => {
    const { list, registry } = listing({ SEARXNG_URL: 'http://127.0.0.1:9' });
    const { tools } = await list();
    assert.deepEqual(tools.find((t) => t.function.name === 'web_search'), { type: 'function', function: WEB_SEARCH_SCHEMA });
    assert.equal(tools.find((t) => t.function.name === 'web_extract'), undefined);
    const executeCode = tools.find((t) => t.function.name === 'execute_code')!;
    assert.match(executeCode.function.description, /web_search/);
    assert.doesNotMatch(executeCode.function.description, /web_extract/);
    const report = await registry.availabilityReport();
    assert.ok(report.available.includes('web'));
    assert.deepEqual(report.unavailable_tools.filter((t) => t.toolset === 'web'), [
      {
        name: 'web_extract',
        toolset: 'web',
        env_vars: ['TAVILY_API_KEY'],
        reason: 'no web extract provider: set TAVILY_API_KEY, or name one (tavily, http) in web.extract_backend',
      },
    ]);
  });

  it('with a keyed provider both are listed; web_extract takes at most 5 URLs', async () => {
    const { tools } = await listing({ TAVILY_API_KEY: 'k' }).list();
    assert.deepEqual(tools.find((t) => t.function.name === 'web_extract'), { type: 'function', function: WEB_EXTRACT_SCHEMA });
    assert.equal((WEB_EXTRACT_SCHEMA.parameters.properties as { urls: { maxItems: number } }).urls.maxItems, 5);
    assert.deepEqual(WEB_SEARCH_SCHEMA.parameters.required, ['query']);
  });
});
