/**
 * The daytona backend's pure parts: the network policy mapped onto
 * Daytona's settings, the sandbox environment (never Daytona's own
 * credentials), names and labels, the line typed into the PTY, the errors a
 * user sees when Daytona says no, and the config check.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DaytonaAuthenticationError, DaytonaBadRequestError, DaytonaError, DaytonaRateLimitError } from '@daytonaio/sdk';
import { parseConfig } from '../../services/common/config-load.js';
import { daytonaNetworkPlan, sandboxEnv, tenantNetworkPlan } from '../../services/executor/backends/daytona/create-daytona-backend.js';
import { daytonaError, sandboxLabels, sandboxName } from '../../services/executor/backends/daytona/daytona-backend.js';
import { DaytonaEnvironment } from '../../services/executor/backends/daytona/daytona-environment.js';
import { setupLine } from '../../services/executor/backends/daytona/pty-agent.js';

describe('daytona network policy', () => {
  it('maps docker.network none and egress none onto networkBlockAll', () => {
    assert.deepEqual(daytonaNetworkPlan('none', 'open', []), { network: { networkBlockAll: true } });
    assert.deepEqual(daytonaNetworkPlan('isolated', 'none', []), { network: { networkBlockAll: true } });
  });

  it('maps egress none with egress_allow onto networkAllowList', () => {
    assert.deepEqual(daytonaNetworkPlan('isolated', 'none', ['10.20.0.0/16', '192.168.1.0/24']), {
      network: { networkAllowList: '10.20.0.0/16,192.168.1.0/24' },
    });
  });

  it('leaves open and bridge networks open', () => {
    assert.deepEqual(daytonaNetworkPlan('isolated', 'open', []), { network: {} });
    assert.deepEqual(daytonaNetworkPlan('bridge', 'none', []), { network: {} });
  });

  it('says that public-only cannot be enforced on Daytona', () => {
    const plan = daytonaNetworkPlan('isolated', 'public-only', []);
    assert.deepEqual(plan.network, {});
    assert.match(plan.unenforced ?? '', /public-only: Daytona has no way to block only private ranges/);
  });

  it('applies a tenant override of the operator policy', () => {
    const config = parseConfig({
      terminal: { backend: 'daytona', daytona_image: 'python:3.12-slim' },
      docker: { egress: 'public-only' },
      tenants: [{ id: 'locked', api_key_sha256: 'a'.repeat(64), network: { egress: 'none' } }],
    });
    assert.deepEqual(tenantNetworkPlan(config, 'locked').network, { networkBlockAll: true });
    assert.ok(tenantNetworkPlan(config, 'other').unenforced);
  });
});

describe('daytona sandbox identity and environment', () => {
  it('names a task stably and labels it by tenant and task', () => {
    const key = { tenant: 'acme', taskId: 'job/1' };
    assert.equal(sandboxName(key), sandboxName({ ...key }));
    assert.notEqual(sandboxName(key), sandboxName({ tenant: 'acme/job', taskId: '1' }));
    assert.match(sandboxName(key), /^berth-[0-9a-f]{32}$/);
    assert.deepEqual(sandboxLabels(key), { 'berth.managed': 'true', 'berth.tenant': 'acme', 'berth.task': 'job/1' });
  });

  it('passes env_passthrough values into the sandbox, never DAYTONA_* credentials', () => {
    const base = { PIP_INDEX_URL: 'https://mirror', DAYTONA_API_KEY: 'secret', daytona_target: 'eu', UNSET: undefined };
    assert.deepEqual(sandboxEnv(['PIP_INDEX_URL', 'DAYTONA_API_KEY', 'daytona_target', 'UNSET'], base), {
      LANG: 'C.UTF-8',
      PIP_INDEX_URL: 'https://mirror',
    });
  });
});

describe('the line typed into the PTY', () => {
  const line = setupLine('0123abcd', ['python3', '/tmp/berth-agent/berth_agent-ff.py', '--stdio'], 44_000);

  it('never echoes the marker itself: only printf output holds it', () => {
    assert.equal(line.includes('BERTH-READY-0123abcd'), false);
    assert.equal(line.includes('BERTH-NOPY-0123abcd'), false);
    assert.match(line, /printf 'BERTH-READY-%s\\n%s\\n%s\\n' 0123abcd "\$HOME" "\$PWD"/);
  });

  it('puts the terminal in raw mode first, then reads exactly the agent and execs it with stderr off the stream', () => {
    assert.ok(line.startsWith('stty raw -echo -iexten 2>/dev/null; '));
    assert.match(line, /head -c 44000 > '\/tmp\/berth-agent\/berth_agent-ff\.py\.\$\$'/);
    assert.match(line, /exec 'python3' '\/tmp\/berth-agent\/berth_agent-ff\.py' '--stdio' 2>>'\/tmp\/berth-agent\/agent\.log'; exit 127\n$/);
    assert.equal(line.indexOf('\n'), line.length - 1, 'one line');
  });
});

describe('what a user sees when Daytona says no', () => {
  it('a refused key names Daytona and the variable to set', () => {
    const err = daytonaError(new DaytonaAuthenticationError('Invalid credentials', 401), 'creating a sandbox for task t');
    assert.equal(err.code, 'UNAUTHENTICATED');
    assert.equal(
      err.message,
      "Daytona refused the API key while creating a sandbox for task t (Invalid credentials): set DAYTONA_API_KEY in the executor's " +
        'environment to a valid key (and DAYTONA_API_URL if you use your own Daytona)',
    );
  });

  it('a rate limit or quota is RESOURCE_EXHAUSTED', () => {
    const err = daytonaError(new DaytonaRateLimitError('Total CPU quota exceeded', 429), 'creating a sandbox for task t');
    assert.equal(err.code, 'RESOURCE_EXHAUSTED');
    assert.match(err.message, /^Daytona's rate limit or quota stopped creating a sandbox for task t \(Total CPU quota exceeded\)/);
  });

  it("the organization's CPU or memory limit is RESOURCE_EXHAUSTED with what to do", () => {
    const err = daytonaError(
      new DaytonaBadRequestError('Total CPU limit exceeded. Maximum allowed: 10.', 400),
      'creating a sandbox of img for task t',
    );
    assert.equal(err.code, 'RESOURCE_EXHAUSTED');
    assert.equal(
      err.message,
      "Daytona's organization limits stopped creating a sandbox of img for task t (Total CPU limit exceeded. Maximum allowed: 10.): " +
        'end idle tasks, lower terminal.container_cpu / container_memory, or raise the limits in Daytona',
    );
  });

  it('a failed build names terminal.daytona_image', () => {
    const err = daytonaError(
      new DaytonaError('Sandbox x failed to start with status: build_failed, error reason: image nope not found'),
      'creating a sandbox of nope for task t',
    );
    assert.equal(err.code, 'FAILED_PRECONDITION');
    assert.match(err.message, /check terminal\.daytona_image$/);
  });

  it('a network failure is UNAVAILABLE and names Daytona', () => {
    const err = daytonaError(new Error('connect ECONNREFUSED 127.0.0.1:1'), 'looking up the sandbox of task t');
    assert.equal(err.code, 'UNAVAILABLE');
    assert.equal(err.message, 'Daytona failed while looking up the sandbox of task t: connect ECONNREFUSED 127.0.0.1:1');
  });
});

describe('daytona config', () => {
  it('needs terminal.daytona_image', () => {
    assert.throws(() => parseConfig({ terminal: { backend: 'daytona' } }), /terminal\.daytona_image: the daytona backend needs it/);
    assert.equal(parseConfig({ terminal: { backend: 'daytona', daytona_image: 'python:3.12-slim' } }).terminal.daytona_image, 'python:3.12-slim');
  });
});

describe('daytona environment keepalive', () => {
  it('pings an idle channel until the environment is disposed', async () => {
    let pings = 0;
    const channel = {
      kind: 'agent' as const,
      isLost: false,
      ping: async () => {
        pings++;
      },
      spawn: () => Promise.reject(new Error('unused')),
      readFile: () => Promise.reject(new Error('unused')),
      writeFile: () => Promise.reject(new Error('unused')),
      stat: () => Promise.reject(new Error('unused')),
      listen: () => Promise.reject(new Error('unused')),
      close: () => undefined,
    };
    let released = 0;
    const env = new DaytonaEnvironment(
      { channel, dirs: { home: '/home/u', cwd: '/work' } },
      {
        description: 'test sandbox',
        reconnect: () => Promise.reject(new Error('unused')),
        stop: () => Promise.reject(new Error('unused')),
        snapshot: () => Promise.reject(new Error('unused')),
        release: async () => {
          released++;
        },
        killGraceMs: 100,
        keepaliveMs: 10,
        logger: undefined,
      },
    );
    assert.deepEqual([env.homeDir, env.initialCwd], ['/home/u', '/work']);
    while (pings < 3) await new Promise((r) => setTimeout(r, 10));
    await env.dispose();
    const after = pings;
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(pings, after, 'pinged after dispose');
    assert.equal(released, 1);
  });
});
