/**
 * API keys through a real `berth serve`: a missing, wrong or revoked key
 * (removed from the config, server restarted) gets UNAUTHENTICATED on every
 * Dispatcher RPC, and no key, nor the SHA-256 of one, appears in the
 * server's log or in any error a client receives. (That keys are compared
 * with every tenant entry in constant time is checked at unit level, in
 * test/unit/tenants.test.ts: timing is not asserted here.)
 *
 * Keys are the dispatcher's business whatever the backend: the local
 * backend (allow_local_multi_tenant) keeps this file fast.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { ClientError, Status } from 'nice-grpc';
import { AsyncQueue } from '../../services/common/async-queue.js';
import { hashApiKey } from '../../services/common/config.js';
import type { DispatcherClient, SessionClientMessage } from '../../services/gen/berth/v1/dispatcher.js';
import { startTwoTenants, TENANT_A, TENANT_B, type TwoTenants } from '../support/two-tenants.js';

/** Every Dispatcher RPC, called once with harmless arguments. */
const RPCS: ReadonlyArray<readonly [string, (c: DispatcherClient) => Promise<unknown>]> = [
  ['ListTools', (c) => c.listTools({ enabledToolsets: [], disabledToolsets: [] })],
  ['CallTool', (c) => c.callTool({ name: 'terminal', argumentsJson: '{"command":"true"}', taskId: 'keys', sessionId: '' })],
  [
    'Session',
    async (c) => {
      const out = new AsyncQueue<SessionClientMessage>();
      out.push({
        message: { $case: 'call', value: { callId: 'k', request: { name: 'terminal', argumentsJson: '{"command":"true"}', taskId: 'keys', sessionId: '' } } },
      });
      out.close();
      for await (const m of c.session(out)) void m;
    },
  ],
  ['Approve', (c) => c.approve({ approvalId: 'appr_000000000000000000000000', choice: 'once', taskId: '', sessionId: '' })],
  ['Interrupt', (c) => c.interrupt({ taskId: 'keys' })],
  ['EndTask', (c) => c.endTask({ taskId: 'keys' })],
];

describe('API keys (local backend, two tenants)', () => {
  let t: TwoTenants;
  /** Every log line and client-side error text seen during the file, searched for secrets at the end. */
  const seen: string[] = [];
  const wrongKey = `key-x-${randomBytes(16).toString('hex')}`;

  const assertUnauthenticatedEverywhere = async (client: DispatcherClient, who: string) => {
    for (const [name, rpc] of RPCS) {
      await assert.rejects(rpc(client), (err: unknown) => {
        assert.ok(err instanceof ClientError, `${who} ${name}: ${String(err)}`);
        assert.equal(err.code, Status.UNAUTHENTICATED, `${who} ${name}: ${err.details}`);
        seen.push(err.message);
        return true;
      });
    }
  };

  before(async () => {
    t = await startTwoTenants({ backend: 'local' });
  });
  after(async () => {
    await t?.stop();
  });

  test('the right keys work: each tenant is served', async () => {
    for (const client of [t.a, t.b]) {
      const r = JSON.parse(await t.call(client, 'terminal', { command: 'echo served' }, 'keys-ok')) as { output?: string };
      assert.equal(r.output, 'served');
    }
  });

  test('a missing key gets UNAUTHENTICATED on every RPC', async () => {
    await assertUnauthenticatedEverywhere(t.clientWith(undefined), 'no key');
  });

  test('a wrong key gets UNAUTHENTICATED on every RPC', async () => {
    await assertUnauthenticatedEverywhere(t.clientWith(wrongKey), 'wrong key');
  });

  test("a near miss (A's key with its last character changed) gets UNAUTHENTICATED on every RPC", async () => {
    const a = t.keys[TENANT_A];
    await assertUnauthenticatedEverywhere(t.clientWith(`${a.slice(0, -1)}${a.endsWith('0') ? '1' : '0'}`), 'near miss');
  });

  test("the stored hash presented as a key (a leaked config file) gets UNAUTHENTICATED on every RPC", async () => {
    await assertUnauthenticatedEverywhere(t.clientWith(hashApiKey(t.keys[TENANT_A])), 'hash as key');
  });

  test('a revoked key (removed from the config, server restarted) gets UNAUTHENTICATED on every RPC; the other still works', async () => {
    seen.push(t.serve.logs());
    const keys = t.keys;
    await t.stop();
    t = await startTwoTenants({ backend: 'local', keys, omit: [TENANT_B] });
    await assertUnauthenticatedEverywhere(t.b, 'revoked key');
    const r = JSON.parse(await t.call(t.a, 'terminal', { command: 'echo still-served' }, 'keys-ok')) as { output?: string };
    assert.equal(r.output, 'still-served');
  });

  test('no key and no key hash appears in the logs or in any error', () => {
    seen.push(t.serve.logs());
    const text = seen.join('\n');
    // The logs hold every call above: the check could see a key if one were logged.
    assert.match(text, /"tenant":"alpha"/);
    assert.match(text, /UNAUTHENTICATED|unknown API key|authorization/);
    for (const key of [t.keys[TENANT_A], t.keys[TENANT_B], wrongKey]) {
      for (const secret of [key, hashApiKey(key)]) {
        assert.ok(!text.includes(secret), `found ${secret.slice(0, 12)}… in the logs or errors`);
      }
    }
  });
});
