import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Metadata } from 'nice-grpc';
import { hashApiKey } from '../../services/common/config.js';
import { parseConfig } from '../../services/common/config-load.js';
import { TenantDirectory } from '../../services/dispatcher/tenants.js';

function md(auth?: string): Metadata {
  const m = new Metadata();
  if (auth !== undefined) m.set('authorization', auth);
  return m;
}

describe('tenants', () => {
  test('single-user mode: every caller is the default tenant', () => {
    const d = new TenantDirectory(parseConfig({}));
    assert.equal(d.authenticate(md()), 'default');
    assert.equal(d.authenticate(md('Bearer whatever')), 'default');
  });

  test('with tenants a Bearer key maps to its tenant; missing or unknown keys are UNAUTHENTICATED', () => {
    const d = new TenantDirectory(
      parseConfig({
        allow_local_multi_tenant: true,
        tenants: [
          { id: 'acme', api_key_sha256: hashApiKey('acme-key') },
          { id: 'globex', api_key_sha256: hashApiKey('globex-key') },
        ],
      }),
    );
    assert.equal(d.authenticate(md('Bearer acme-key')), 'acme');
    assert.equal(d.authenticate(md('bearer globex-key')), 'globex');
    for (const bad of [undefined, 'acme-key', 'Bearer nope', 'Basic abc']) {
      assert.throws(() => d.authenticate(md(bad)), (e: Error & { code?: string }) => e.code === 'UNAUTHENTICATED', String(bad));
    }
  });

  test('a key is compared with every tenant entry, in constant time each, wherever it matches', () => {
    const keys = ['k-first', 'k-second', 'k-third', 'k-fourth'];
    const config = parseConfig({
      allow_local_multi_tenant: true,
      tenants: keys.map((k, i) => ({ id: `t${i}`, api_key_sha256: hashApiKey(k) })),
    });
    const seen: string[] = [];
    const d = new TenantDirectory(config, {
      compare: (stored, presented) => {
        assert.equal(stored.length, presented.length, 'timingSafeEqual needs equal lengths');
        seen.push(stored.toString('hex'));
        return stored.equals(presented);
      },
    });
    const every = keys.map((k) => hashApiKey(k));
    for (const [presented, tenant] of [['k-first', 't0'], ['k-fourth', 't3'], ['k-none', undefined]] as const) {
      seen.length = 0;
      if (tenant === undefined) assert.throws(() => d.authenticate(md(`Bearer ${presented}`)), /unknown API key/);
      else assert.equal(d.authenticate(md(`Bearer ${presented}`)), tenant);
      assert.deepEqual(seen, every, `${presented}: every entry compared once, in order`);
    }
  });
});
