import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Metadata } from 'nice-grpc';
import { hashApiKey, parseConfig } from '../../services/common/config.js';
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
});
