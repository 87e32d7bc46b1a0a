/** `berth doctor`'s line on processes in docker snapshots: what `criu check` says, run for real against stand-in criu scripts. */
import assert from 'node:assert/strict';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { checkpointFinding, runCriuCheck } from '../../services/executor/backends/docker/checkpoint-check.js';

describe('criu check, as the doctor runs it', () => {
  let dir: string;
  /** A test double of the criu binary: prints `lines` (to stderr, as criu does) and exits `code`. */
  async function criu(name: string, lines: readonly string[], code: number): Promise<string> {
    const file = path.join(dir, name);
    const echo = lines.map((l) => `echo '${l}' >&2`).join('\n');
    await writeFile(file, `#!/bin/sh\n${echo}\nexit ${code}\n`);
    await chmod(file, 0o755);
    return file;
  }
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'berth-criu-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test('a failing check: its last line is the reason the doctor shows', async () => {
    const failing = await criu('failing', ['Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds', 'Error (criu/crtools.c:260): Could not initialize kernel features detection.', ''], 1);
    const check = await runCriuCheck(failing);
    assert.deepEqual(check, { installed: true, passed: false, detail: 'Error (criu/crtools.c:260): Could not initialize kernel features detection.' });
    assert.equal(
      checkpointFinding('', check).text,
      'processes in snapshots: criu check fails on this host (Error (criu/crtools.c:260): Could not initialize kernel features detection.): ' +
        'docker snapshots hold files and shell state, not running processes',
    );
  });

  test('a passing check still says Berth does not checkpoint memory', async () => {
    const check = await runCriuCheck(await criu('passing', ['Looks good.'], 0));
    assert.deepEqual(check, { installed: true, passed: true, detail: 'Looks good.' });
    assert.match(checkpointFinding('runc', check).text, /^processes in snapshots: criu check passes on this host, but Berth does not checkpoint container memory with it: /);
  });

  test('no criu on the host, and gVisor (no criu asked)', async () => {
    const check = await runCriuCheck(path.join(dir, 'not-installed'));
    assert.deepEqual(check, { installed: false, passed: false, detail: '' });
    assert.match(checkpointFinding('', check).text, /^processes in snapshots: criu is not installed on this host: docker snapshots hold files and shell state/);
    assert.match(checkpointFinding('runsc', undefined).text, /^processes in snapshots: gVisor's checkpoint is not used \(docs\/lifecycle\.md says why\)/);
  });
});
