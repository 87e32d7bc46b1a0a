/**
 * The pure parts of the modal backend: the network policy on the SDK's
 * options, sandbox names, what a user reads when Modal says no, and the
 * bootstrap that starts the exec agent from its source on stdin.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { bootstrapCode } from '../../services/executor/backends/modal/modal-agent.js';
import { findAgentScript } from '../../services/executor/backends/shared/agent/agent-script.js';
import { AGENT_PROTOCOL_VERSION } from '../../services/executor/backends/shared/agent/agent-protocol.js';
import { sandboxName } from '../../services/executor/backends/modal/modal-backend.js';
import { modalError } from '../../services/executor/backends/modal/modal-errors.js';
import { modalNetwork, tenantModalPolicy } from '../../services/executor/backends/modal/modal-network.js';
import { realPython } from '../support/python-bin.js';

describe('modal network policy', () => {
  it('blocks the network for egress none, and allows only egress_allow when it is set', () => {
    assert.deepEqual(modalNetwork({ egress: 'none', egressAllow: [] }), { options: { blockNetwork: true }, unmapped: undefined });
    assert.deepEqual(modalNetwork({ egress: 'none', egressAllow: ['10.1.0.0/16'] }), {
      options: { outboundCidrAllowlist: ['10.1.0.0/16'] },
      unmapped: undefined,
    });
  });

  it('leaves egress open for open, and says what public-only cannot map', () => {
    assert.deepEqual(modalNetwork({ egress: 'open', egressAllow: [] }), { options: {}, unmapped: undefined });
    const publicOnly = modalNetwork({ egress: 'public-only', egressAllow: [] });
    assert.deepEqual(publicOnly.options, {});
    assert.match(publicOnly.unmapped ?? '', /public-only has no Modal option/);
  });

  it("narrows the operator's policy by the tenant's override", () => {
    const operator = { egress: 'public-only' as const, egressAllow: ['10.0.0.0/8'] };
    assert.deepEqual(tenantModalPolicy(operator, { egress: 'none' }), { egress: 'none', egressAllow: ['10.0.0.0/8'] });
    assert.deepEqual(tenantModalPolicy(operator, undefined), operator);
  });
});

describe('modal sandbox names', () => {
  it('are stable per tenant and task, distinct between them, and valid Modal names whatever the ids hold', () => {
    const a = sandboxName({ tenant: 'acme', taskId: 'task/1 with spaces' });
    assert.equal(a, sandboxName({ tenant: 'acme', taskId: 'task/1 with spaces' }));
    assert.notEqual(a, sandboxName({ tenant: 'other', taskId: 'task/1 with spaces' }));
    assert.match(a, /^[A-Za-z0-9._-]{1,63}$/);
  });
});

describe('modal errors', () => {
  it('name Modal and the fix for missing or refused credentials', () => {
    const missing = modalError(new Error('Profile is missing credentials. Please set them in .modal.toml'), 'starting');
    assert.equal(missing.name, 'FailedPreconditionError');
    assert.match(missing.message, /Modal credentials are missing: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET/);
    const refused = modalError(Object.assign(new Error('x'), { code: 16, details: 'Token ID or secret is invalid' }), 'looking up the app berth');
    assert.equal(refused.name, 'FailedPreconditionError');
    assert.match(refused.message, /^Modal refused the credentials while looking up the app berth \(Token ID or secret is invalid\): check MODAL_TOKEN_ID/);
  });

  it('say which image Modal could not build, and map quota and reachability', () => {
    const image = modalError(new Error('Image build for im-1 failed with the exception:\nnot found'), 'creating', 'nosuch:1');
    assert.match(image.message, /^Modal could not build terminal.modal_image "nosuch:1" while creating: Image build for im-1 failed/);
    assert.equal(modalError(Object.assign(new Error('q'), { code: 8, details: 'quota' }), 'creating').name, 'ResourceExhaustedError');
    assert.equal(modalError(Object.assign(new Error('down'), { code: 14 }), 'creating').name, 'UnavailableError');
  });
});

describe('the agent bootstrap', () => {
  const cwd = mkdtempSync(path.join(os.tmpdir(), 'berth-modal-bootstrap-'));
  after(() => rmSync(cwd, { recursive: true, force: true }));

  it("runs the archive's __main__.py with --stdio and its package from the archive, leaving the rest of stdin unread", () => {
    // A package of the same name in the working directory (a command could make one) must not stand in for the archive's.
    mkdirSync(path.join(cwd, 'berth_agent'), { recursive: true });
    writeFileSync(path.join(cwd, 'berth_agent', '__init__.py'), 'raise SystemExit("the planted package was imported")\n');
    const archive = zipOf({
      '__main__.py':
        'import sys, os\nimport berth_agent.part as p\nsys.stdout.write(repr((__name__, sys.argv, p.WHERE, p.__file__)) + "|" + os.read(0, 100).decode() + "|" + os.environ["BERTH_SANDBOX_WORKDIR"])\n',
      'berth_agent/__init__.py': '',
      'berth_agent/part.py': 'WHERE = "archive"\n',
    });
    const r = spawnSync(realPython(), ['-c', bootstrapCode(archive.length), '--stdio'], { input: Buffer.concat([archive, Buffer.from('FRAMES')]), cwd, encoding: 'utf8' });
    assert.equal(r.stderr, '');
    assert.equal(r.stdout, `('__main__', ['berth_agent.pyz', '--stdio'], 'archive', '<stdin>/berth_agent.pyz/berth_agent/part.py')|FRAMES|${cwd}`);
  });

  it('hands the agent the options after -c CODE (a linger socket, a pid to resume), unchanged', () => {
    const archive = zipOf({ '__main__.py': 'import sys\nsys.stdout.write(repr(sys.argv))\n' });
    const argv = ['--stdio', '--linger', '/tmp/berth-state-0a1b/agent/linger.sock', '--resume', '42'];
    const r = spawnSync(realPython(), ['-c', bootstrapCode(archive.length), ...argv], { input: archive, encoding: 'utf8' });
    assert.equal(r.stderr, '');
    assert.equal(r.stdout, repr(['berth_agent.pyz', ...argv]));
  });

  it("runs this installation's agent from memory: it says hello and ends with its stream", () => {
    const archive = readFileSync(findAgentScript());
    const r = spawnSync(realPython(), ['-I', '-S', '-c', bootstrapCode(archive.length), '--stdio'], { input: archive, cwd });
    assert.equal(r.status, 0, r.stderr.toString());
    const hello = JSON.parse(r.stdout.subarray(8, 8 + r.stdout.readUInt32BE(4)).toString()) as { op: string; version: number };
    assert.equal(hello.op, 'hello');
    assert.equal(hello.version, AGENT_PROTOCOL_VERSION);
  });

  it('exits 3 when stdin ends before the archive does', () => {
    const r = spawnSync(realPython(), ['-c', bootstrapCode(100), '--stdio'], { input: 'short' });
    assert.equal(r.status, 3);
  });
});

/** A zip archive of `files` (name -> text), as Python's zipfile writes it. */
function zipOf(files: Record<string, string>): Buffer {
  const code = 'import io, json, sys, zipfile\nb = io.BytesIO()\nwith zipfile.ZipFile(b, "w") as z:\n    for k, v in json.load(sys.stdin).items():\n        z.writestr(k, v)\nsys.stdout.buffer.write(b.getvalue())';
  return spawnSync(realPython(), ['-c', code], { input: JSON.stringify(files) }).stdout;
}

/** A list of strings as Python's repr() writes it. */
function repr(items: readonly string[]): string {
  return `[${items.map((i) => `'${i}'`).join(', ')}]`;
}
