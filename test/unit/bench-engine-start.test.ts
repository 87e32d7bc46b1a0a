/**
 * The engine's own start of Berth's container (the cold burst's second
 * baseline) and the ablation of its settings: the specs they build from
 * container-spec.ts, their labels, the pairing of variants, the table. No
 * timing is asserted: benchmarks are not tests.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type Docker from 'dockerode';
import { parseConfig } from '../../services/common/config-load.js';
import { VARIANTS, ablationTable, cyclePairs, medianOf } from '../../services/cli/bench/engine-ablation.js';
import { ENGINE_RUN_LABEL, benchLabels, placementOf, runningTrue, taskSpecRunningTrue } from '../../services/cli/bench/engine-start.js';
import { CONTAINER_CAPABILITIES } from '../../services/executor/backends/docker/container-spec.js';

const placement = { network: 'berth-isolated-0123456789', cgroupParent: '/berth/tabc', uid: 1_900_000_001 };

function spec(config: Record<string, unknown> = { terminal: { container_persistent: false } }): Docker.ContainerCreateOptions {
  return taskSpecRunningTrue(parseConfig(config), placement, 'bench-engine-1-0', '/tmp/berth-bench-engine-x');
}

describe("the engine's start of Berth's container", () => {
  test("is Berth's hardened spec with `true` in place of the agent", () => {
    const s = spec();
    assert.deepEqual(s.Entrypoint, ['true']);
    assert.deepEqual(s.Cmd, []);
    const h = s.HostConfig!;
    assert.deepEqual(h.CapDrop, ['ALL']);
    assert.deepEqual(h.CapAdd, [...CONTAINER_CAPABILITIES]);
    assert.deepEqual(h.SecurityOpt, ['no-new-privileges:true']);
    assert.equal(h.Init, true);
    assert.equal(h.NetworkMode, placement.network);
    assert.equal(h.CgroupParent, placement.cgroupParent);
    assert.equal(h.Memory, parseConfig({}).terminal.container_memory * 1024 * 1024);
    assert.ok(h.Tmpfs?.['/tmp']);
    // The task's binds: host directory, account files, and resolv.conf under the default `isolated` network.
    assert.deepEqual(
      h.Mounts!.map((m) => m.Target),
      ['/run/berth', '/etc/passwd', '/etc/group', '/etc/resolv.conf'],
    );
  });

  test("carries no `berth.*` label (no executor's sweep or test run's leftover check takes it for Berth's), as many of its own", () => {
    const s = spec();
    const keys = Object.keys(s.Labels!);
    assert.ok(!keys.some((k) => k.startsWith('berth.')), keys.join(', '));
    assert.equal(s.Labels!['berth-bench'], '1');
    assert.equal(s.Labels![ENGINE_RUN_LABEL], String(process.pid));
    assert.equal(s.Labels!['berth-bench.uid'], String(placement.uid));
  });

  test('with `container_persistent`, asks for the two named volumes, labelled as the bench\'s', () => {
    const volumes = spec({ terminal: { container_persistent: true } }).HostConfig!.Mounts!.filter((m) => m.Type === 'volume');
    assert.deepEqual(
      volumes.map((v) => v.Source),
      ['bench-engine-1-0-workspace', 'bench-engine-1-0-home'],
    );
    for (const v of volumes) assert.equal(v.VolumeOptions?.Labels?.[ENGINE_RUN_LABEL], String(process.pid));
  });

  test('benchLabels renames Berth\'s labels and keeps the others', () => {
    assert.deepEqual(benchLabels({ 'berth.task': 't', other: 'x' }), {
      'berth-bench.task': 't',
      other: 'x',
      'berth-bench': '1',
      [ENGINE_RUN_LABEL]: String(process.pid),
    });
  });

  test('runningTrue leaves a spec without host config without one', () => {
    const s = runningTrue({ Image: 'i', Entrypoint: ['/bin/sh'], Cmd: ['-c', 'x'] });
    assert.deepEqual(s.Entrypoint, ['true']);
    assert.equal(s.HostConfig, undefined);
  });

  test("placementOf reads a task container's network, cgroup parent, uid and layer limit", () => {
    const info = {
      HostConfig: { NetworkMode: 'berth-isolated-aa', CgroupParent: '/berth/t1', StorageOpt: { size: '51200m' } },
      Config: { Labels: { 'berth.uid': '1900000042' } },
    } as unknown as Docker.ContainerInspectInfo;
    assert.deepEqual(placementOf(info), { network: 'berth-isolated-aa', cgroupParent: '/berth/t1', uid: 1_900_000_042, layerMiB: 51_200 });
  });
});

describe('the ablation of its settings', () => {
  test('pairs every variant with a plain round once a cycle, plain first then second, the first variant moving along', () => {
    const n = VARIANTS.length;
    for (const cycle of [0, 1, 2]) {
      const pairs = cyclePairs(n, cycle);
      assert.equal(pairs.length, n - 1);
      assert.ok(pairs.every((p) => p.filter((v) => v === 0).length === 1));
      assert.ok(pairs.every((p) => p[cycle % 2] === 0));
      const others = pairs.map((p) => p[0] + p[1]);
      assert.deepEqual([...others].sort((a, b) => a - b), Array.from({ length: n - 1 }, (_, i) => i + 1));
      assert.equal(others[0], 1 + (cycle % (n - 1)));
    }
  });

  test('each variant adds to the plain spec only what it names', () => {
    const berth = {
      plainNetwork: 'bench-ablation-plain',
      task: spec(),
      persistent: spec({ terminal: { container_persistent: true } }),
      readOnly: spec({ terminal: { container_persistent: false }, docker: { read_only_root: true } }),
    };
    const plain = runningTrue({ name: 'n', Image: 'i', HostConfig: {} });
    const specs = VARIANTS.map((v) => v.spec(plain, berth));
    assert.deepEqual(specs[0], plain);
    const network = VARIANTS.findIndex((v) => v.name.startsWith("Berth's own bridge"));
    assert.deepEqual(specs[network]!.HostConfig, { NetworkMode: placement.network });
    const volumes = VARIANTS.findIndex((v) => v.name.startsWith('named volumes'));
    assert.deepEqual(specs[volumes]!.HostConfig!.Mounts!.map((m) => m.Type), ['volume', 'volume']);
    const whole = VARIANTS.findIndex((v) => v.name === "Berth's whole spec");
    assert.deepEqual(specs[whole], berth.task);
  });

  test('the table gives each variant a row, failed rounds left out of the medians', () => {
    assert.equal(medianOf([NaN, 2, 4]), 3);
    assert.ok(Number.isNaN(medianOf([NaN])));
    const row = { p50Ms: 1500, ratio: 1.5, cpuRatio: 2, cpuMs: 700, createMs: 30, startMs: 1200, errors: 0 };
    const table = ablationTable([
      { name: 'plain', ...row, ratio: 1, cpuRatio: 1 },
      { name: 'network', ...row, errors: 2, cpuMs: NaN },
    ]);
    const lines = table.split('\n');
    assert.equal(lines.length, 4);
    assert.match(lines[3]!, /^\| network \(2 failed\) \| 1500 \| 1\.50 \| – \| 2\.00 \| 30 \| 1200 \|$/);
  });
});
