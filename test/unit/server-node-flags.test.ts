/** The image runs Berth's servers with the Node flags the bench measures them with (server-node-flags.ts). */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { SERVER_NODE_FLAGS } from '../../services/cli/server-node-flags.js';
import { REPO_ROOT } from '../support/serve-process.js';

test("deploy/Dockerfile's ENTRYPOINT passes exactly SERVER_NODE_FLAGS to node, before bin/berth", () => {
  const dockerfile = readFileSync(join(REPO_ROOT, 'deploy', 'Dockerfile'), 'utf8');
  const entrypoint = /^ENTRYPOINT\s+(\[.*\])\s*$/m.exec(dockerfile);
  assert.ok(entrypoint, 'an exec-form ENTRYPOINT');
  assert.deepEqual(JSON.parse(entrypoint[1]!), ['/usr/local/bin/node', ...SERVER_NODE_FLAGS, '/opt/berth/bin/berth']);
});

test('this Node.js accepts the flags, on the command line and in NODE_OPTIONS', () => {
  for (const [args, env] of [
    [[...SERVER_NODE_FLAGS, '-e', '0'], process.env],
    [['-e', '0'], { ...process.env, NODE_OPTIONS: SERVER_NODE_FLAGS.join(' ') }],
  ] as const) {
    const r = spawnSync(process.execPath, args, { env, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
  }
});
