/**
 * terminal.container_disk on the docker backend: which daemon answers count
 * as "cannot apply a disk limit", and what each docker.disk_limit mode does
 * then. The daemon messages are the ones Docker 20.10 gives on overlay2 over
 * ext4 (seen here) and those of other storage drivers and older versions.
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, test } from 'node:test';
import { FailedPreconditionError } from '../../services/common/errors.js';
import { createLogger } from '../../services/common/logging.js';
import { DiskLimits, diskLimitRefusal, type DiskLimitMode } from '../../services/executor/backends/docker/disk-limits.js';

/** A dockerode error as the Engine API returns it. */
function apiError(statusCode: number, message: string): Error {
  return Object.assign(new Error(`(HTTP code ${statusCode}) unexpected - ${message}`), { statusCode, json: { message } });
}

const LAYER_REFUSED = apiError(400, "--storage-opt is supported only for overlay over xfs with 'pquota' mount option");
const VOLUME_REFUSED = apiError(500, 'create berth-abc-workspace: quota size requested but no quota support');

function limits(mode: DiskLimitMode, volumes = true) {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      callback();
    },
  });
  const logger = createLogger('warn', stream);
  return { limits: new DiskLimits({ mode, sizeMiB: 100, volumes, daemon: 'the Docker daemon', logger }), lines };
}

describe('diskLimitRefusal', () => {
  test('tells a refused layer limit from a refused volume limit and from other errors', () => {
    assert.equal(diskLimitRefusal(LAYER_REFUSED), 'layer');
    assert.equal(diskLimitRefusal(apiError(500, 'Storage Opt not supported')), 'layer');
    assert.equal(diskLimitRefusal(apiError(400, 'devmapper: Unknown option size')), 'layer');
    assert.equal(diskLimitRefusal(VOLUME_REFUSED), 'volumes');
    assert.equal(diskLimitRefusal(apiError(400, 'create v: invalid option key: "size"')), 'volumes');
    assert.equal(diskLimitRefusal(apiError(404, 'No such image: berth-sandbox:latest')), undefined);
    assert.equal(diskLimitRefusal(apiError(409, 'Conflict. The container name "/berth-x" is already in use')), undefined);
    assert.equal(diskLimitRefusal(new Error('connect ENOENT /var/run/docker.sock')), undefined);
  });
});

describe('DiskLimits', () => {
  test('asks for both limits until the daemon answers, and keeps asking once they held', () => {
    const { limits: l } = limits('auto');
    assert.deepEqual(l.state, { layer: 'unknown', volumes: 'unknown' });
    const first = l.request();
    assert.deepEqual(first, { layerMiB: 100, volumeMiB: 100 });
    l.applied(first);
    assert.deepEqual(l.state, { layer: 'enforced', volumes: 'enforced' });
    assert.deepEqual(l.request(), { layerMiB: 100, volumeMiB: 100 });
  });

  test('auto: a refused part is dropped from later creates and logged once, even when creates overlap', () => {
    const { limits: l, lines } = limits('auto');
    const a = l.request();
    const b = l.request();
    assert.equal(l.refused(LAYER_REFUSED, a), true, 'retry without the layer limit');
    assert.equal(l.refused(LAYER_REFUSED, b), true, 'a create that asked before the first refusal retries too');
    assert.deepEqual(l.request(), { volumeMiB: 100 });
    assert.equal(l.refused(VOLUME_REFUSED, l.request()), true);
    assert.deepEqual(l.request(), {});
    assert.deepEqual(l.state, { layer: 'unsupported', volumes: 'unsupported' });
    const warnings = lines.filter((x) => x.level === 40);
    assert.deepEqual(warnings.map((w) => w.part), ['layer', 'volumes']);
    assert.match(String(warnings[0]!.msg), /terminal\.container_disk \(100 MiB\) cannot be applied to a container's writable layer/);
    assert.match(String(warnings[0]!.msg), /docker\.disk_limit: require/);
  });

  test('auto: errors that are not about disk limits are not swallowed', () => {
    const { limits: l } = limits('auto');
    assert.equal(l.refused(apiError(404, 'No such image: x'), l.request()), false);
    assert.equal(l.refused(apiError(500, 'Storage Opt not supported'), {}), false, 'a limit never asked for cannot be refused');
    assert.deepEqual(l.state, { layer: 'unknown', volumes: 'unknown' });
  });

  test('require: a refusal is a FailedPrecondition that says how to fix it', () => {
    const { limits: l } = limits('require');
    assert.throws(
      () => l.refused(LAYER_REFUSED, l.request()),
      (err: unknown) =>
        err instanceof FailedPreconditionError &&
        /cannot be applied to a container's writable layer/.test(err.message) &&
        /XFS mounted with pquota/.test(err.message) &&
        /docker\.disk_limit: auto/.test(err.message),
    );
    assert.deepEqual(l.state, { layer: 'unknown', volumes: 'unknown' }, 'still asked for next time');
  });

  test('off asks for nothing; without named volumes only the layer is limited', () => {
    assert.deepEqual(limits('off').limits.request(), {});
    assert.deepEqual(limits('off').limits.state, { layer: 'off', volumes: 'off' });
    const { limits: l } = limits('auto', false);
    assert.deepEqual(l.request(), { layerMiB: 100 });
    assert.deepEqual(l.state, { layer: 'unknown', volumes: 'off' });
  });
});
