/**
 * Task snapshots on the docker backend (docs/lifecycle.md): one image per
 * snapshot, `berth-snapshot:<id>`, holding the container's file changes and
 * the contents of its persistent volumes (workspace, home) in its layers,
 * and the snapshot's metadata (owner, source task, label, time, shell state)
 * in its labels, so every executor on the Docker host that shares the name
 * key lists it.
 *
 * Making one (persistent volumes): `docker commit` of the task's container
 * into an untagged image; a helper container from that image, with the
 * task's volumes mounted read-only, copies them over its own workspace and
 * home (`cp -a`); `docker commit` of the helper, with every label, tagged.
 * Without persistent volumes the workspace and home are in the container's
 * own layer: one commit. The tagged commit is the last step, so a snapshot
 * cut off half-way is never listed; what it left (the helper container, the
 * untagged image) is removed by the orphan sweep ({@link sweepSnapshotLeftovers}).
 *
 * A fork starts its container from the snapshot's image: Docker fills the
 * fork's new (empty) volumes from the image's workspace and home ("copy-up"),
 * and the container's entrypoint gives them to the fork's own uid, as it does
 * for any volume whose top directory is another uid's.
 *
 * Measured (2 cores, overlay2, a task with 100 MiB in 100 files in its
 * workspace volume; see docs/lifecycle.md): `docker commit` of the changes
 * 0.8-1.2 s against `docker export` 4.7-7.7 s; a fork by copy-up from the
 * image 3.2-5.4 s against 5.0-8.1 s for a helper `cp -a` into new volumes and
 * a start (a plain container start took 2.4-3.7 s on that machine then).
 * Copying the volumes in a helper costs the same whether its result lands in
 * volumes or in an image, so the snapshot is one image: forks skip a helper.
 *
 * Deleting a snapshot untags its image: forks running from it keep it until
 * they end; the sweep removes untagged snapshot images nobody uses.
 *
 * Under gVisor (`docker.runtime: runsc`) `docker commit` sees the container's
 * file changes only when runsc writes them through to the host (runsc
 * `--overlay2=none`, how scripts/ensure-docker.sh registers it); with
 * gVisor's own overlay they stay in the sandbox's memory and a commit would
 * silently hold none of them. So before its first snapshot each executor
 * checks: it writes a probe file in a task's container as root and asks
 * Docker for the container's changes; when the probe is not among them,
 * snapshots are refused ({@link GVISOR_OVERLAY_REFUSAL}) rather than taken
 * without the files.
 */
import type Dockerode from 'dockerode';
import { randomBytes } from 'node:crypto';
import { FailedPreconditionError, NotFoundError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { SNAPSHOT_ID_PATTERN, unknownSnapshotMessage } from '../../../common/snapshot-ids.js';
import type { BackendSnapshot } from '../../backend.js';
import { execInContainer } from './container-exec.js';
import { LABEL, type PersistentVolumeNames } from './container-spec.js';
import { dockerError, isConflict, isNotFound } from './docker-errors.js';

/** The repository of snapshot images; the tag is the snapshot id. */
export const SNAPSHOT_REPOSITORY = 'berth-snapshot';

export const SNAPSHOT_LABEL = {
  /** The snapshot id, on the finished image. */
  id: 'berth.snapshot.id',
  /** The owner: the tenant's keyed hash (TaskNames.snapshotOwner). Only finished images carry it. */
  owner: 'berth.snapshot.owner',
  task: 'berth.snapshot.task',
  label: 'berth.snapshot.label',
  createdMs: 'berth.snapshot.created_ms',
  cwd: 'berth.snapshot.cwd',
  /** The shell state, base64. */
  shell: 'berth.snapshot.shell',
  /** On the intermediate image and the helper container of a snapshot under way: its id. */
  part: 'berth.snapshot.part',
  /** When the part was made (ms): the sweep leaves younger parts to the snapshot making them. */
  partMs: 'berth.snapshot.part_ms',
} as const;

/** A part (untagged image) older than this belongs to a snapshot that will never finish. */
const PART_MAX_AGE_MS = 30 * 60 * 1000;

/**
 * Labels a snapshot's image must not pass on to fork containers as values of
 * its source's (they set their own; these blank what they might not).
 */
const BLANKED_LABELS = [LABEL.task, LABEL.tenant, LABEL.hostDir, LABEL.uid, LABEL.pool, LABEL.role] as const;

export interface DockerSnapshotsOptions {
  readonly docker: Dockerode;
  readonly daemon: string;
  readonly logger: Logger;
  /** The tenant's keyed hash (TaskNames.snapshotOwner). */
  readonly ownerOf: (tenant: string) => string;
  /** The configured image: snapshot sizes are what they add to it. */
  readonly baseImage: string;
  readonly workspaceDir: string;
  readonly homeDir: string;
  /** The labels of this executor, for the helper container (the orphan sweep removes it when the executor is gone). */
  readonly executorLabels: () => Readonly<Record<string, string>>;
  /**
   * Check once, before the first snapshot, that `docker commit` sees a file
   * written in the container (gVisor: runsc without its own overlay).
   */
  readonly probeCommitVisibility?: boolean;
}

/** Why a snapshot is refused under a gVisor whose overlay hides the container's changes from Docker. */
export const GVISOR_OVERLAY_REFUSAL =
  "snapshots under gVisor need runsc to write the container's changes through to the host (runsc --overlay2=none, as " +
  "scripts/ensure-docker.sh registers it): this runsc keeps them in its sandbox, where docker commit cannot see them, so a " +
  'snapshot would hold none of them. Register runsc with --overlay2=none in /etc/docker/daemon.json, or use the default runtime';

/** The snapshot's image name. */
export function snapshotImage(id: string): string {
  return `${SNAPSHOT_REPOSITORY}:${id}`;
}

/** The finished image's labels. Pure. */
export function snapshotLabels(snapshot: Omit<BackendSnapshot, 'sizeBytes' | 'includesProcesses'>, owner: string): Record<string, string> {
  return {
    ...Object.fromEntries(BLANKED_LABELS.map((l) => [l, ''])),
    [SNAPSHOT_LABEL.id]: snapshot.id,
    [SNAPSHOT_LABEL.owner]: owner,
    [SNAPSHOT_LABEL.task]: snapshot.sourceTaskId,
    [SNAPSHOT_LABEL.label]: snapshot.label,
    [SNAPSHOT_LABEL.createdMs]: String(snapshot.createdAtMs),
    [SNAPSHOT_LABEL.cwd]: snapshot.shell.cwd,
    [SNAPSHOT_LABEL.shell]: Buffer.from(snapshot.shell.script, 'utf8').toString('base64'),
    [SNAPSHOT_LABEL.part]: '',
  };
}

/** A snapshot from its image's labels; undefined when they do not make one of `tenant`'s. Pure. */
export function snapshotFromLabels(
  labels: Readonly<Record<string, string>>,
  tenant: string,
  owner: string,
  sizeBytes: number,
): BackendSnapshot | undefined {
  const id = labels[SNAPSHOT_LABEL.id] ?? '';
  const createdAtMs = Number(labels[SNAPSHOT_LABEL.createdMs]);
  if (labels[SNAPSHOT_LABEL.owner] !== owner || !SNAPSHOT_ID_PATTERN.test(id) || !Number.isSafeInteger(createdAtMs)) return undefined;
  return {
    id,
    tenant,
    sourceTaskId: labels[SNAPSHOT_LABEL.task] ?? '',
    label: labels[SNAPSHOT_LABEL.label] ?? '',
    createdAtMs,
    sizeBytes: Math.max(0, sizeBytes),
    includesProcesses: false,
    shell: {
      cwd: labels[SNAPSHOT_LABEL.cwd] ?? '',
      script: Buffer.from(labels[SNAPSHOT_LABEL.shell] ?? '', 'base64').toString('utf8'),
    },
  };
}

/** The helper's script: each `$src $dst` pair's contents replace the destination's. */
export const COPY_VOLUMES_SCRIPT = [
  'set -e',
  'while [ $# -gt 0 ]; do',
  '  src=$1; dst=$2; shift 2',
  '  /bin/mkdir -p "$dst"',
  '  /usr/bin/find "$dst" -mindepth 1 -delete',
  '  /bin/cp -a "$src/." "$dst/"',
  'done',
].join('\n');

export class DockerSnapshots {
  readonly #o: DockerSnapshotsOptions;
  #baseSize: Promise<number> | undefined;
  /** The probe's answer (whether commit sees the container's changes), once it has one. */
  #commitSees: Promise<boolean> | undefined;

  constructor(options: DockerSnapshotsOptions) {
    this.#o = options;
  }

  /** Snapshots container `containerId` (and its volumes); the tagged commit comes last. */
  async take(
    containerId: string,
    volumes: PersistentVolumeNames | undefined,
    snapshot: Omit<BackendSnapshot, 'sizeBytes' | 'includesProcesses'>,
  ): Promise<BackendSnapshot> {
    if (this.#o.probeCommitVisibility && !(await this.#commitSeesChanges(containerId))) throw new FailedPreconditionError(GVISOR_OVERLAY_REFUSAL);
    const labels = snapshotLabels(snapshot, this.#o.ownerOf(snapshot.tenant));
    const part = { [SNAPSHOT_LABEL.part]: snapshot.id, [SNAPSHOT_LABEL.partMs]: String(Date.now()) };
    let from = containerId;
    let helper: Dockerode.Container | undefined;
    try {
      if (volumes) {
        const intermediate = await this.#commit(containerId, part);
        helper = await this.#copyVolumes(intermediate, volumes, part);
        from = helper.id;
      }
      await this.#commit(from, labels, snapshot.id);
    } finally {
      await helper?.remove({ force: true }).catch((err: unknown) => this.#o.logger.warn({ err, snapshot: snapshot.id }, 'removing a snapshot helper failed'));
    }
    const found = await this.find(snapshot.tenant, snapshot.id);
    if (!found) throw new UnavailableError(`snapshot ${snapshot.id} was made but Docker does not list it`);
    return found.snapshot;
  }

  /** The tenant's finished snapshots on this Docker host. */
  async list(tenant: string): Promise<BackendSnapshot[]> {
    const owner = this.#o.ownerOf(tenant);
    let images: Dockerode.ImageInfo[];
    try {
      images = await this.#o.docker.listImages({ filters: { label: [`${SNAPSHOT_LABEL.owner}=${owner}`], dangling: ['false'] } });
    } catch (err) {
      throw dockerError(err, 'listing snapshot images', this.#o.daemon);
    }
    const base = await this.#baseImageSize();
    const out: BackendSnapshot[] = [];
    for (const image of images) {
      const snapshot = snapshotFromLabels(image.Labels ?? {}, tenant, owner, image.Size - base);
      if (snapshot && (image.RepoTags ?? []).includes(snapshotImage(snapshot.id))) out.push(snapshot);
    }
    return out;
  }

  /** One of the tenant's snapshots and its image id; undefined when the tenant has none of that id. */
  async find(tenant: string, id: string): Promise<{ snapshot: BackendSnapshot; imageId: string } | undefined> {
    if (!SNAPSHOT_ID_PATTERN.test(id)) return undefined;
    let info: Dockerode.ImageInspectInfo;
    try {
      info = await this.#o.docker.getImage(snapshotImage(id)).inspect();
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw dockerError(err, `inspecting snapshot ${id}`, this.#o.daemon);
    }
    const snapshot = snapshotFromLabels(info.Config?.Labels ?? {}, tenant, this.#o.ownerOf(tenant), info.Size - (await this.#baseImageSize()));
    return snapshot && snapshot.id === id ? { snapshot, imageId: info.Id } : undefined;
  }

  /** The image a fork of the tenant's snapshot starts from (by id: a delete meanwhile cannot change it). */
  async imageFor(snapshot: BackendSnapshot): Promise<string> {
    const found = await this.find(snapshot.tenant, snapshot.id);
    if (!found) throw new NotFoundError(unknownSnapshotMessage(snapshot.id));
    return found.imageId;
  }

  /** Untags the tenant's snapshot (forks running from it keep its image until they end). */
  async delete(tenant: string, id: string): Promise<boolean> {
    if (!(await this.find(tenant, id))) return false;
    try {
      await this.#o.docker.getImage(snapshotImage(id)).remove({ force: true });
    } catch (err) {
      if (isNotFound(err)) return false;
      throw dockerError(err, `deleting snapshot ${id}`, this.#o.daemon);
    }
    return true;
  }

  /** Whether Docker sees a file written in the container; asked once per executor (a failed probe is asked again). */
  #commitSeesChanges(containerId: string): Promise<boolean> {
    this.#commitSees ??= this.#probe(containerId).catch((err: unknown) => {
      this.#commitSees = undefined;
      throw err;
    });
    return this.#commitSees;
  }

  async #probe(containerId: string): Promise<boolean> {
    const container = this.#o.docker.getContainer(containerId);
    const file = `/.berth-snapshot-probe-${randomBytes(6).toString('hex')}`;
    try {
      const wrote = await execInContainer(container, { cmd: ['/bin/sh', '-c', 'printf probe > "$1"', 'probe', file], user: '0:0' });
      if (wrote.exitCode !== 0) throw new UnavailableError(`checking that docker commit sees this container's changes: writing a probe file failed: ${wrote.stderrLine}`);
      const changes = ((await container.changes()) as { Path?: string }[] | null) ?? [];
      const seen = changes.some((c) => c.Path === file);
      this.#o.logger.info({ seen }, seen ? 'gVisor: docker commit sees the container\'s changes; snapshots on' : 'gVisor: docker commit does not see the container\'s changes; snapshots refused');
      return seen;
    } catch (err) {
      throw err instanceof UnavailableError ? err : dockerError(err, 'checking that docker commit sees the container\'s changes', this.#o.daemon);
    } finally {
      await execInContainer(container, { cmd: ['/bin/rm', '-f', '--', file], user: '0:0' }).catch(() => undefined);
    }
  }

  async #commit(containerId: string, labels: Record<string, string>, tag?: string): Promise<string> {
    const query = { container: containerId, pause: true, ...(tag !== undefined ? { repo: SNAPSHOT_REPOSITORY, tag } : {}) };
    try {
      const answer = (await this.#o.docker.getContainer(containerId).commit({ _query: query, _body: { Labels: labels } })) as { Id?: string };
      if (!answer.Id) throw new Error('docker commit answered without an image id');
      return answer.Id;
    } catch (err) {
      throw dockerError(err, 'committing a snapshot image', this.#o.daemon);
    }
  }

  /** Runs the helper that copies the volumes into its own layer; resolves to the stopped helper. */
  async #copyVolumes(image: string, volumes: PersistentVolumeNames, part: Record<string, string>): Promise<Dockerode.Container> {
    const { docker, workspaceDir, homeDir } = this.#o;
    const pairs = [
      ['/berth-src/workspace', workspaceDir, volumes.workspace],
      ['/berth-src/home', homeDir, volumes.home],
    ] as const;
    let helper: Dockerode.Container;
    try {
      helper = await docker.createContainer({
        Image: image,
        User: '0:0',
        Entrypoint: ['/bin/sh', '-c', COPY_VOLUMES_SCRIPT, 'berth-snapshot'],
        Cmd: pairs.flatMap(([src, dst]) => [src, dst]),
        WorkingDir: '/',
        Env: [],
        Labels: { ...this.#o.executorLabels(), ...Object.fromEntries(BLANKED_LABELS.map((l) => [l, ''])), ...part },
        NetworkDisabled: true,
        HostConfig: {
          NetworkMode: 'none',
          Mounts: pairs.map(([src, , volume]) => ({ Type: 'volume' as const, Source: volume, Target: src, ReadOnly: true })),
          CapDrop: ['ALL'],
          // To read every file whatever its mode and keep owners, modes and times on the copies.
          CapAdd: ['CHOWN', 'DAC_OVERRIDE', 'DAC_READ_SEARCH', 'FOWNER', 'FSETID'],
          SecurityOpt: ['no-new-privileges'],
          Init: false,
        },
      });
    } catch (err) {
      throw dockerError(err, 'creating the snapshot helper container', this.#o.daemon);
    }
    try {
      await helper.start();
      const exit = (await helper.wait()) as { StatusCode?: number };
      if (exit.StatusCode !== 0) {
        const logs = (await helper.logs({ stdout: true, stderr: true, tail: 20 })).toString('utf8').slice(-2000);
        throw new UnavailableError(`copying the task's volumes into the snapshot failed (exit ${exit.StatusCode}): ${logs}`);
      }
    } catch (err) {
      await helper.remove({ force: true }).catch(() => undefined);
      throw err instanceof UnavailableError ? err : dockerError(err, 'running the snapshot helper container', this.#o.daemon);
    }
    return helper;
  }

  #baseImageSize(): Promise<number> {
    this.#baseSize ??= this.#o.docker
      .getImage(this.#o.baseImage)
      .inspect()
      .then(
        (info) => info.Size,
        () => {
          this.#baseSize = undefined;
          return 0;
        },
      );
    return this.#baseSize;
  }
}

/**
 * Removes what snapshots left on the Docker host: untagged intermediate
 * images of snapshots cut off half-way, and untagged snapshot images
 * (deleted) that no container uses any more. An image in use answers 409 and
 * stays. Helper containers are swept with their executor's other containers.
 *
 * Only images older than {@link PART_MAX_AGE_MS} go, finished ones too: the
 * daemon makes a tagged commit's image first and tags it after, so another
 * executor's snapshot under way shows, for a moment, as an untagged finished
 * image (its tag then fails with "failed to get digest" if the sweep of an
 * executor starting on the same host removed it). A deleted snapshot's image
 * waits for a later sweep instead.
 */
export async function sweepSnapshotLeftovers(docker: Dockerode, logger: Logger, nowMs = Date.now()): Promise<string[]> {
  const removed: string[] = [];
  const images = await docker.listImages({ all: true, filters: { dangling: ['true'], label: [SNAPSHOT_LABEL.part] } });
  for (const image of images) {
    const labels = image.Labels ?? {};
    const finished = (labels[SNAPSHOT_LABEL.owner] ?? '') !== '';
    const madeMs = Number(finished ? labels[SNAPSHOT_LABEL.createdMs] : labels[SNAPSHOT_LABEL.partMs]);
    if (Number.isFinite(madeMs) && nowMs - madeMs < PART_MAX_AGE_MS) continue;
    try {
      await docker.getImage(image.Id).remove();
      removed.push(image.Id);
      logger.info({ image: image.Id.slice(0, 19), snapshot: labels[SNAPSHOT_LABEL.id] || labels[SNAPSHOT_LABEL.part] }, 'orphan sweep: removed a snapshot leftover');
    } catch (err) {
      if (!isConflict(err) && !isNotFound(err)) logger.warn({ err, image: image.Id }, 'orphan sweep: removing a snapshot leftover failed');
    }
  }
  return removed;
}
