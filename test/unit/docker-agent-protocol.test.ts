/** Pure parts of the docker backend: agent frames, stream demuxing, cgroup counters, executor liveness, errors. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  FrameDecoder,
  FrameError,
  MAX_INBOUND_FRAME_BYTES,
  MAX_OUTBOUND_FRAME_BYTES,
  backgroundExitCode,
  encodeFrame,
  foregroundExitCode,
} from '../../services/executor/backends/shared/agent/agent-protocol.js';
import { parseCounter } from '../../services/executor/backends/docker/cgroup-counters.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerError, missingImageError } from '../../services/executor/backends/docker/docker-errors.js';
import { DockerStreamDemuxer } from '../../services/executor/backends/docker/docker-stream-demuxer.js';
import {
  HEARTBEAT_STALE_MS,
  judgeExecutor,
  containerIdFromMountinfo,
  type ExecutorIdentity,
} from '../../services/executor/backends/docker/executor-identity.js';
import { isInside } from '../../services/executor/backends/docker/orphan-sweep.js';

describe('agent frames', () => {
  test('round-trip header and binary body, cut at every byte', () => {
    const body = Buffer.from([0, 255, 10, 13, 0x80]);
    const wire = Buffer.concat([
      encodeFrame({ op: 'out', id: 7 }, body),
      encodeFrame({ op: 'exit', id: 7, code: 3, signal: null }),
    ]);
    for (let cut = 0; cut <= wire.length; cut++) {
      const d = new FrameDecoder();
      const frames = [...d.push(wire.subarray(0, cut)), ...d.push(wire.subarray(cut))];
      assert.equal(frames.length, 2, `cut at ${cut}`);
      assert.deepEqual(frames[0]!.header, { op: 'out', id: 7 });
      assert.deepEqual(frames[0]!.body, body);
      assert.deepEqual(frames[1]!.header, { op: 'exit', id: 7, code: 3, signal: null });
      assert.equal(frames[1]!.body.length, 0);
    }
  });

  test('a 5 MB body (executor to agent) arriving in small chunks decodes once, intact', () => {
    const body = Buffer.alloc(5 * 1024 * 1024, 7);
    const wire = encodeFrame({ op: 'spawn', id: 1 }, body);
    const d = new FrameDecoder(MAX_OUTBOUND_FRAME_BYTES);
    const frames = [];
    for (let at = 0; at < wire.length; at += 65536) frames.push(...d.push(wire.subarray(at, at + 65536)));
    assert.equal(frames.length, 1);
    assert.ok(frames[0]!.body.equals(body));
  });

  test('malformed frames are refused', () => {
    const bad = Buffer.alloc(8);
    bad.writeUInt32BE(4, 0);
    bad.writeUInt32BE(100, 4);
    assert.throws(() => new FrameDecoder().push(bad), FrameError);
    const notJson = Buffer.concat([Buffer.from([0, 0, 0, 7, 0, 0, 0, 3]), Buffer.from('{{{')]);
    assert.throws(() => new FrameDecoder().push(notJson), FrameError);
  });

  test('a length prefix over the inbound cap is refused from its 8 bytes, before any body arrives', () => {
    const prefix = Buffer.alloc(8);
    prefix.writeUInt32BE(MAX_INBOUND_FRAME_BYTES + 1, 0);
    prefix.writeUInt32BE(10, 4);
    const d = new FrameDecoder();
    assert.throws(() => d.push(prefix), /frame of 1048577 bytes is over the 1048576-byte cap/);
    // The largest frame allowed still decodes.
    const header = { op: 'data', id: 12345 };
    const body = Buffer.alloc(MAX_INBOUND_FRAME_BYTES - 4 - JSON.stringify(header).length);
    const wire = encodeFrame(header, body);
    assert.equal(wire.length - 4, MAX_INBOUND_FRAME_BYTES);
    assert.equal(new FrameDecoder().push(wire).length, 1);
  });

  test('exit codes: 128+n in the foreground, -n in the background', () => {
    assert.equal(foregroundExitCode(3, null), 3);
    assert.equal(foregroundExitCode(null, 9), 137);
    assert.equal(backgroundExitCode(null, 15), -15);
    assert.equal(backgroundExitCode(0, null), 0);
  });
});

describe('DockerStreamDemuxer', () => {
  test('splits stdout and stderr records cut across chunks, in order', () => {
    const record = (type: number, text: string) => {
      const payload = Buffer.from(text);
      const head = Buffer.alloc(8);
      head[0] = type;
      head.writeUInt32BE(payload.length, 4);
      return Buffer.concat([head, payload]);
    };
    const wire = Buffer.concat([record(1, 'out1'), record(2, 'err'), record(1, 'out2')]);
    const d = new DockerStreamDemuxer();
    const parts = [...d.push(wire.subarray(0, 5)), ...d.push(wire.subarray(5, 15)), ...d.push(wire.subarray(15))];
    assert.deepEqual(
      parts.map((p) => [p.stream, p.data.toString()]),
      [
        ['stdout', 'out1'],
        ['stderr', 'err'],
        ['stdout', 'out2'],
      ],
    );
    assert.equal(d.pendingBytes, 0);
  });
});

describe('parseCounter', () => {
  test('reads cgroup v1 and v2 counters', () => {
    assert.equal(parseCounter('oom_kill_disable 0\nunder_oom 0\noom_kill 2\n', 'oom_kill'), 2);
    assert.equal(parseCounter('low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n', 'oom_kill'), 1);
    assert.equal(parseCounter('max 17\n', 'max'), 17);
    assert.equal(parseCounter('nothing here', 'max'), undefined);
  });
});

describe('judgeExecutor', () => {
  const self: ExecutorIdentity = { id: 'ex-me', pid: 10, startTicks: '100', pidNamespace: 'b/ns1', stateRoot: '/state' };
  const labels = (over: Record<string, string>) => ({
    [LABEL.executor]: 'ex-other',
    [LABEL.executorPid]: '20',
    [LABEL.executorStart]: '200',
    [LABEL.executorPidNs]: 'b/ns1',
    [LABEL.stateRoot]: '/state',
    ...over,
  });
  const probes = (procs: Record<number, string>, heartbeats: Record<string, number>) => ({
    processStartTicks: (pid: number) => procs[pid],
    heartbeatAgeMs: (id: string) => heartbeats[id],
  });

  test('our own containers are ours', () => {
    assert.equal(judgeExecutor(labels({ [LABEL.executor]: 'ex-me' }), self, probes({}, {})), 'self');
  });

  test('same pid namespace: alive only while that pid runs with the same start time', () => {
    assert.equal(judgeExecutor(labels({}), self, probes({ 20: '200' }, {})), 'alive');
    assert.equal(judgeExecutor(labels({}), self, probes({}, { 'ex-other': 0 })), 'gone', 'killed -9: no such pid');
    assert.equal(judgeExecutor(labels({}), self, probes({ 20: '999' }, {})), 'gone', 'pid reused by another process');
  });

  test('same pid namespace and state root: a running pid whose heartbeat is stale is stopped or hung, and gone', () => {
    assert.equal(judgeExecutor(labels({}), self, probes({ 20: '200' }, { 'ex-other': 1000 })), 'alive');
    assert.equal(judgeExecutor(labels({}), self, probes({ 20: '200' }, { 'ex-other': HEARTBEAT_STALE_MS + 1 })), 'gone', 'SIGSTOP: beats stopped');
    assert.equal(judgeExecutor(labels({}), self, probes({ 20: '200' }, { 'ex-other': 2500 }), 2000), 'gone', 'docker.executor_stale_ms');
    assert.equal(judgeExecutor(labels({}), self, probes({ 20: '200' }, {})), 'alive', 'no heartbeat file to judge by: the pid decides');
    const elsewhere = labels({ [LABEL.stateRoot]: '/elsewhere' });
    assert.equal(judgeExecutor(elsewhere, self, probes({ 20: '200' }, { 'ex-other': HEARTBEAT_STALE_MS + 1 })), 'alive', 'not our heartbeat directory');
  });

  test('another namespace sharing the state root: judged by the heartbeat', () => {
    const other = labels({ [LABEL.executorPidNs]: 'b/ns2' });
    assert.equal(judgeExecutor(other, self, probes({}, { 'ex-other': 1000 })), 'alive');
    assert.equal(judgeExecutor(other, self, probes({}, { 'ex-other': HEARTBEAT_STALE_MS + 1 })), 'gone');
    assert.equal(judgeExecutor(other, self, probes({}, {})), 'gone');
  });

  test("its own container on the same daemon: gone at once when that container exited or is gone; paused or running, the heartbeat decides", () => {
    const container = 'c'.repeat(64);
    const other = labels({ [LABEL.executorPidNs]: 'b/ns2', [LABEL.executorContainer]: container });
    const withContainer = (gone: boolean | undefined, heartbeatAge: number) => ({
      ...probes({}, { 'ex-other': heartbeatAge }),
      containerGone: (id: string) => (id === container ? gone : undefined),
    });
    assert.equal(judgeExecutor(other, self, withContainer(true, 100)), 'gone', 'killed: its container exited, its heartbeat still fresh');
    assert.equal(judgeExecutor(other, self, withContainer(false, 100)), 'alive');
    assert.equal(judgeExecutor(other, self, withContainer(false, HEARTBEAT_STALE_MS + 1)), 'gone', 'paused too long: the heartbeat went stale');
    assert.equal(judgeExecutor(other, self, withContainer(undefined, 100)), 'alive', 'the daemon could not tell: the heartbeat decides');
    const elsewhere = labels({ [LABEL.executorPidNs]: 'c/ns9', [LABEL.stateRoot]: '/elsewhere', [LABEL.executorContainer]: container });
    assert.equal(judgeExecutor(elsewhere, self, withContainer(true, 100)), 'gone', 'another state root: the daemon still knows');
  });

  test("the executor's container id comes from its mount table", () => {
    const id = 'ab12'.repeat(16);
    const line = (target: string) => `612 600 8:1 /var/lib/docker/containers/${id}/${target} /etc/${target} rw,relatime - ext4 /dev/sda1 rw\n`;
    assert.equal(containerIdFromMountinfo(`${line('resolv.conf')}${line('hostname')}`), id);
    assert.equal(containerIdFromMountinfo('25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n'), undefined);
  });

  test('another host with another state root, or no labels: unknown, left alone', () => {
    const foreign = labels({ [LABEL.executorPidNs]: 'c/ns9', [LABEL.stateRoot]: '/elsewhere' });
    assert.equal(judgeExecutor(foreign, self, probes({}, {})), 'unknown');
    assert.equal(judgeExecutor({}, self, probes({}, {})), 'unknown');
  });

  test('the sweep only deletes host directories under the state root', () => {
    assert.equal(isInside('/state/docker', '/state/docker/tasks/x'), true);
    assert.equal(isInside('/state/docker', '/state/docker'), false);
    assert.equal(isInside('/state/docker', '/etc'), false);
    assert.equal(isInside('/state/docker', '/state/docker/../../etc'), false);
  });
});

describe('docker errors', () => {
  test('an unreachable daemon is UNAVAILABLE and says how to start it', () => {
    const err = Object.assign(new Error('connect ENOENT /nope.sock'), { code: 'ENOENT' });
    const mapped = dockerError(err, 'creating a container', 'the Docker daemon at /nope.sock');
    assert.equal(mapped.code, 'UNAVAILABLE');
    assert.match(mapped.message, /\/nope\.sock/);
    assert.match(mapped.message, /ensure-docker/);
  });

  test('a missing image names the image and make image', () => {
    const err = missingImageError('berth-sandbox:nope', 'the Docker daemon');
    assert.equal(err.code, 'FAILED_PRECONDITION');
    assert.match(err.message, /berth-sandbox:nope/);
    assert.match(err.message, /make image/);
  });

  test('an unknown runtime is a configuration problem', () => {
    const err = Object.assign(new Error('(HTTP code 400) unexpected'), {
      statusCode: 400,
      json: { message: 'Unknown runtime specified runsc' },
    });
    assert.equal(dockerError(err, 'creating', 'the Docker daemon').code, 'FAILED_PRECONDITION');
  });
});
