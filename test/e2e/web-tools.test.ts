/**
 * End to end: `bin/berth serve` with and without a web provider in its
 * environment, driven through the CLI (`berth tools`, `berth tools --explain`,
 * `berth call web_search`). The only provider is a SearXNG stand-in on
 * loopback.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pythonBinDir } from '../support/python-bin.js';
import { startServe, type ServeProcess } from '../support/serve-process.js';
import { sendJson, startHttpStandIn, type HttpStandIn } from '../support/http-stand-in.js';

/** The variables that would give the server a provider; cleared so the developer's own do not leak in. */
const NO_WEB_ENV = { TAVILY_API_KEY: '', TAVILY_API_URL: '', TAVILY_BASE_URL: '', SEARXNG_URL: '', SEARXNG_TIMEOUT: '' };

interface Availability {
  available: string[];
  unavailable: { name: string; env_vars: string[]; tools: string[]; reason: string }[];
  unavailable_tools: { name: string; toolset: string; env_vars: string[]; reason: string }[];
}

describe('berth tools --explain and the web tools (serve, local backend)', () => {
  let bare: ServeProcess;
  let withSearch: ServeProcess;
  let searxng: HttpStandIn;
  let scratch: string;

  before(async () => {
    searxng = await startHttpStandIn((req, res) => {
      const q = new URL(req.url, 'http://x').searchParams.get('q');
      sendJson(res, {
        results: [
          { title: 'Berth', url: 'https://berth.example/', content: `you asked ${q}`, score: 2 },
          { title: 'Other', url: 'https://other.example/', content: 'second', score: 1 },
        ],
      });
    });
    scratch = mkdtempSync(join(tmpdir(), 'berth-e2e-web-'));
    // Scripts skip pyenv shims; no login profile slows new task shells.
    const scriptEnv = { PATH: `${pythonBinDir(scratch)}:${process.env.PATH ?? ''}`, HOME: scratch };
    [bare, withSearch] = await Promise.all([
      startServe([], { env: NO_WEB_ENV }),
      startServe([], { env: { ...NO_WEB_ENV, ...scriptEnv, SEARXNG_URL: searxng.baseUrl } }),
    ]);
  });

  after(async () => {
    await Promise.all([bare.stop(), withSearch.stop()]);
    await searxng.close();
    rmSync(scratch, { recursive: true, force: true });
  });

  it('without a provider: the web toolset is reported unavailable with the variables it needs', async () => {
    const r = await bare.cli(['tools', '--explain']);
    assert.equal(r.code, 0, r.stderr);
    const report = JSON.parse(r.stdout) as Availability;
    assert.ok(report.available.includes('terminal'), r.stdout);
    assert.ok(!report.available.includes('web'));
    const web = report.unavailable.find((t) => t.name === 'web');
    assert.deepEqual(web && { name: web.name, env_vars: web.env_vars, tools: web.tools }, {
      name: 'web',
      env_vars: ['TAVILY_API_KEY', 'SEARXNG_URL'],
      tools: ['web_extract', 'web_search'],
    });
    assert.match(web!.reason, /no web search provider: set TAVILY_API_KEY or SEARXNG_URL/);

    const listed = await bare.cli(['tools']);
    const names = (JSON.parse(listed.stdout) as { function: { name: string } }[]).map((t) => t.function.name);
    assert.ok(names.includes('terminal') && !names.includes('web_search') && !names.includes('web_extract'));
  });

  it('with SearXNG: web_search is listed and answers; web_extract is still explained as missing', async () => {
    const listed = await withSearch.cli(['tools', '--toolsets', 'web']);
    assert.equal(listed.code, 0, listed.stderr);
    assert.deepEqual((JSON.parse(listed.stdout) as { function: { name: string } }[]).map((t) => t.function.name), ['web_search']);

    const called = await withSearch.cli(['call', 'web_search', '{"query":"sandboxes"}']);
    assert.equal(called.code, 0, called.stderr);
    assert.deepEqual(JSON.parse(called.stdout), {
      success: true,
      data: {
        web: [
          { title: 'Berth', url: 'https://berth.example/', description: 'you asked sandboxes', position: 1 },
          { title: 'Other', url: 'https://other.example/', description: 'second', position: 2 },
        ],
      },
    });

    const explained = JSON.parse((await withSearch.cli(['tools', '--explain'])).stdout) as Availability;
    assert.ok(explained.available.includes('web'));
    assert.deepEqual(explained.unavailable_tools.find((t) => t.name === 'web_extract')?.env_vars, ['TAVILY_API_KEY']);
  });

  it('execute_code scripts call web_search with limit, and never see the provider variables', async () => {
    const code = [
      'import os',
      'from hermes_tools import web_search',
      'r = web_search("from a script", limit=1)',
      'print(len(r["data"]["web"]), r["data"]["web"][0]["description"], os.environ.get("SEARXNG_URL", "unset"))',
    ].join('\n');
    const r = await withSearch.cli(['call', 'execute_code', JSON.stringify({ code }), '--task', 'web-script'], { timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.stderr);
    const result = JSON.parse(r.stdout) as { status: string; output: string; tool_calls_made: number };
    assert.equal(result.status, 'success', r.stdout);
    assert.equal(result.output.trim(), '1 you asked from a script unset');
    assert.equal(result.tool_calls_made, 1);
  });
});
