/**
 * `berth doctor` as a user runs it: the real CLI against the local backend
 * and the real Docker engine. It must say what works, fail with the fix when
 * something does not, and leave no container or volume behind.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startModalStandin, type StandinProcess } from '../support/modal-standin-process.js';
import { BERTH_BIN, REPO_ROOT } from '../support/serve-process.js';

const docker = new Dockerode();
const dockerUnavailable = await dockerUnavailableReason(docker);

let stateRoot: string;

async function doctor(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [BERTH_BIN, 'doctor', ...args], {
      cwd: REPO_ROOT,
      env: { ...process.env, BERTH_STATE_ROOT: stateRoot, ...env },
      timeout: 180_000,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

const lines = (stdout: string) => stdout.trim().split('\n');

describe('berth doctor', () => {
  before(async () => {
    stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-doctor-'));
  });
  after(async () => {
    await rm(stateRoot, { recursive: true, force: true });
  });

  it('local backend: says what it checked and exits 0', async () => {
    const r = await doctor(['--backend', 'local']);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const out = lines(r.stdout);
    assert.equal(out[0], 'berth doctor: backend local');
    assert.equal(out[1], 'ok    the local backend starts');
    assert.match(out[2]!, /^ok {4}a new task runs a command \(\d+ ms, as uid \d+\)$/);
    assert.match(out[3]!, /^ok {4}the same task runs the next command \([\d.]+ ms, exit 0\)$/);
    assert.equal(out[4], 'ok    lifecycle of the local backend: snapshot no, processes in snapshots no, suspend no');
    assert.equal(out.at(-1), '4 ok, 0 warnings, 0 failed');
  });

  describe('docker backend (real engine)', { skip: dockerUnavailable }, () => {
    const leftovers = async () => {
      const filters = { label: [`${LABEL.tenant}=berth-doctor`] };
      const containers = await docker.listContainers({ all: true, filters });
      const { Volumes } = await docker.listVolumes({ filters });
      return [...containers.map((c) => c.Names.join(',')), ...(Volumes ?? []).map((v) => v.Name)];
    };

    it('runs a command through the exec agent as the sandbox user and leaves nothing behind', async () => {
      const r = await doctor(['--backend', 'docker']);
      assert.equal(r.code, 0, r.stdout + r.stderr);
      const out = r.stdout;
      // The task's own uid, one of docker.task_uids.
      assert.match(out, /^ok {4}a new task runs a command \(\d+ ms, as uid 19\d{8}\)$/m);
      assert.match(out, /^ok {4}commands reach the container through the exec agent$/m);
      assert.match(out, /^ok {4}docker\.network: isolated is enforced: \d+ ip(6)?tables( and ip6tables)? rules in place, the task's container is on berth-isolated-[0-9a-f]{10}$/m);
      // Whatever this host's storage can do about container_disk, the doctor says it.
      assert.match(out, /^(ok {4}terminal\.container_disk is enforced|warn {2}terminal\.container_disk \(51200 MiB\) cannot be applied)/m);
      // Where Docker cannot enforce it, Berth measures it (enforced by Docker, or measured by Berth).
      if (/cannot be applied/.test(out)) {
        assert.match(out, /^ok {4}terminal\.container_disk is measured by Berth on the writable layer( and the persistent volumes)? \(Docker cannot enforce it on this storage\).*this task uses \d+ MiB$/m);
      }
      assert.match(out, /^ok {4}lifecycle of the docker backend: snapshot (yes|no), processes in snapshots (yes|no), suspend yes$/m);
      assert.match(out, /^ok {4}a task suspends \(\d+ ms\) and its next command resumes it \(\d+ ms\)$/m);
      assert.match(out, /^ok {4}docker\.memory_overcommit: this executor admits up to \d+ MiB of sandbox memory limits \(\d+ MiB × 1\.5\), counting this executor's sandboxes \(docker\.memory_scope: executor\); \d+ MiB held now \(this executor's: \d+ MiB\)$/m);
      // What this host's `criu check` says, asked here independently of the doctor.
      const criu = await promisify(execFile)('criu', ['check'], { timeout: 20_000 }).then(
        () => 'passes on this host, but Berth does not checkpoint container memory with it',
        (err: NodeJS.ErrnoException & { stderr?: string }) =>
          err.code === 'ENOENT' ? 'is not installed on this host' : `check fails on this host (${(err.stderr ?? '').trim().split('\n').at(-1)!.trim()})`,
      );
      assert.ok(
        lines(out).includes(`ok    processes in snapshots: criu ${criu}: docker snapshots hold files and shell state, not running processes`),
        `criu ${criu}\n${out}`,
      );
      assert.match(lines(out).at(-1)!, /^\d+ ok, \d+ warnings, 0 failed$/);
      assert.deepEqual(await leftovers(), []);
    });

    it('a host that cannot enforce docker.network: isolated fails with the fix, exit 1, and starts no container', async () => {
      // No iptables on PATH: the executor refuses to start rather than run containers on the plain bridge.
      const r = await doctor(['--backend', 'docker'], { PATH: '/nonexistent' });
      assert.equal(r.code, 1, r.stdout + r.stderr);
      assert.match(r.stdout, /^fail {2}the docker backend does not start: docker\.network: isolated cannot be enforced on this host: iptables does not work here .*set docker\.network: bridge/m);
      assert.deepEqual(await leftovers(), []);
    });

    it('a missing image fails with how to build it, exit 1', async () => {
      const r = await doctor(['--backend', 'docker'], { TERMINAL_DOCKER_IMAGE: 'berth-doctor-no-such-image:1' });
      assert.equal(r.code, 1, r.stdout + r.stderr);
      assert.match(r.stdout, /^fail {2}a command in a new task failed: the sandbox image berth-doctor-no-such-image:1 does not exist.*make image/m);
      assert.match(lines(r.stdout).at(-1)!, /, 1 failed$/);
      assert.deepEqual(await leftovers(), []);
    });

    it('a configuration the backend refuses fails at start with the reason', async () => {
      const r = await doctor(['--backend', 'docker'], { TERMINAL_DOCKER_EXTRA_ARGS: '--privileged' });
      assert.equal(r.code, 1, r.stdout + r.stderr);
      assert.match(r.stdout, /^fail {2}the docker backend does not start: terminal\.docker_extra_args: --privileged is not accepted/m);
    });
  });

  describe('modal backend (the Modal stand-in, a test double, via MODAL_SERVER_URL)', { skip: dockerUnavailable }, () => {
    let standin: StandinProcess;
    const sandboxes = () => standin.containers();
    before(async () => {
      standin = await startModalStandin();
    });
    after(async () => {
      await standin?.stop();
    });

    it('checks credentials, image, create/exec/release and the network policy, and leaves no sandbox running', async () => {
      const config = path.join(stateRoot, 'egress-none.yaml');
      await writeFile(config, 'docker:\n  egress: none\n');
      const r = await doctor(['--backend', 'modal', '--config', config], { ...standin.env, TERMINAL_MODAL_IMAGE: SANDBOX_IMAGE });
      assert.equal(r.code, 0, r.stdout + r.stderr);
      const out = r.stdout;
      assert.match(out, /^ok {4}the modal backend starts$/m);
      assert.match(out, /^ok {4}a new task runs a command \(\d+ ms, as uid 1000\)$/m);
      assert.match(out, /^ok {4}commands reach the Modal sandbox through the exec agent, on one exec of Modal's SDK; execute_code runs in the sandbox$/m);
      assert.match(out, /^ok {4}network policy: egress none is applied as Modal's blockNetwork$/m);
      assert.match(out, /^ok {4}release terminated the Modal sandbox$/m);
      assert.match(out, /^ok {4}lifecycle of the modal backend: snapshot yes, processes in snapshots no, suspend yes$/m);
      assert.match(out, /^ok {4}a task suspends \(\d+ ms\) and its next command resumes it \(\d+ ms\)$/m);
      // The one warning: the stand-in is on a loopback address, so the SDK skips TLS to its command router.
      assert.match(out, /^warn {2}the Modal SDK reaches the command router without TLS because MODAL_SERVER_URL is a loopback address/m);
      assert.match(lines(out).at(-1)!, /^9 ok, 1 warnings, 0 failed$/);
      assert.deepEqual(await sandboxes(), []);
    });

    it('says which part of the network policy Modal cannot apply', async () => {
      // public-only is docker.egress's default.
      const r = await doctor(['--backend', 'modal'], { ...standin.env, TERMINAL_MODAL_IMAGE: SANDBOX_IMAGE });
      assert.equal(r.code, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /^warn {2}network policy: egress public-only has no Modal option/m);
    });

    it('a bad token fails at start naming Modal and the fix, exit 1', async () => {
      const r = await doctor(['--backend', 'modal'], { ...standin.env, MODAL_TOKEN_SECRET: 'as-wrong', TERMINAL_MODAL_IMAGE: SANDBOX_IMAGE });
      assert.equal(r.code, 1, r.stdout + r.stderr);
      assert.match(r.stdout, /^fail {2}the modal backend does not start: Modal refused the credentials while looking up the app berth .*check MODAL_TOKEN_ID and MODAL_TOKEN_SECRET/m);
    });

    it('an image Modal cannot build fails with the image named, exit 1, and nothing left running', async () => {
      const r = await doctor(['--backend', 'modal'], { ...standin.env, TERMINAL_MODAL_IMAGE: 'berth-doctor-no-such-image:1' });
      assert.equal(r.code, 1, r.stdout + r.stderr);
      assert.match(r.stdout, /^fail {2}a command in a new task failed: Modal could not build terminal\.modal_image "berth-doctor-no-such-image:1"/m);
      assert.deepEqual(await sandboxes(), []);
    });
  });
});
