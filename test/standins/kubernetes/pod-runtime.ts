/**
 * Kubernetes stand-in (a test double): the kubelet's part, on the local
 * Docker engine. A pod's one container becomes a Docker container: image,
 * command/args (entrypoint/cmd with Kubernetes' override rules), env,
 * workingDir, the security context (user and groups, read-only root,
 * capabilities, no-new-privileges, seccomp), cpu and memory limits, and
 * volumes (PVCs as Docker volumes, emptyDir as a Docker volume or tmpfs,
 * the service-account token and downwardAPI files as read-only binds, a
 * downwardAPI `subPath` as its one file). Every container and
 * volume carries {@link STANDIN_LABEL} with the stand-in's instance id.
 */
import { chmodSync, chownSync, lstatSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type Dockerode from 'dockerode';
import { parseQuantity } from './quantity.js';

/* eslint-disable @typescript-eslint/no-explicit-any -- pod specs are validated JSON */
type Spec = Record<string, any>;

/** Label on every container, volume and network the Kubernetes stand-in makes; value: its instance id. */
export const STANDIN_LABEL = 'berth.standin.kubernetes';
/** Label naming the pod (`namespace/name`) a container runs. */
export const POD_LABEL = 'berth.standin.kubernetes.pod';

/** Kubernetes never copies an image's files into a volume, as Docker does into a new named volume by default. */
const NO_COPY = { NoCopy: true } as Dockerode.MountSettings['VolumeOptions'];

export interface PodRef {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  /** What a downwardAPI volume's files hold. */
  readonly labels?: Readonly<Record<string, string>>;
  readonly annotations?: Readonly<Record<string, string>>;
}

/** Why a container cannot be made, as the kubelet reports it in a waiting state. */
export class ContainerConfigError extends Error {}

export interface RuntimeOptions {
  readonly docker: Dockerode;
  readonly instance: string;
  /** The Docker network pods join (the stand-in's pod network). */
  readonly network: string;
  /** RuntimeClass name to Docker runtime. */
  readonly runtimeClasses: ReadonlyMap<string, string>;
  /** Where the service-account token directories of pods are written. */
  readonly stateDir: string;
  /** The Docker volume of a claim (namespace, claim name), or undefined when there is none. */
  readonly claimVolume: (namespace: string, claim: string) => string | undefined;
}

export interface ImageInfo {
  readonly user: string;
}

export class PodRuntime {
  readonly #o: RuntimeOptions;

  constructor(options: RuntimeOptions) {
    this.#o = options;
  }

  /** The image's configured user, or undefined when the local engine does not have the image. */
  async image(name: string): Promise<ImageInfo | undefined> {
    try {
      const info = await this.#o.docker.getImage(name).inspect();
      return { user: info.Config?.User ?? '' };
    } catch {
      return undefined;
    }
  }

  /** The uid the container runs as, checked against runAsNonRoot as the kubelet checks it. */
  #user(pod: PodRef, spec: Spec, c: Spec, image: ImageInfo): string | undefined {
    const psc = spec.securityContext ?? {};
    const sc = c.securityContext ?? {};
    const uid: number | undefined = sc.runAsUser ?? psc.runAsUser;
    const gid: number | undefined = sc.runAsGroup ?? psc.runAsGroup;
    const nonRoot: boolean = sc.runAsNonRoot ?? psc.runAsNonRoot ?? false;
    const imageUser = image.user.split(':')[0] ?? '';
    const podText = `pod: "${pod.name}_${pod.namespace}(${pod.uid})", container: ${c.name}`;
    if (nonRoot) {
      if (uid === 0) throw new ContainerConfigError(`container's runAsUser breaks non-root policy (${podText})`);
      if (uid === undefined) {
        if (imageUser === '' || imageUser === '0' || imageUser === 'root') throw new ContainerConfigError(`container has runAsNonRoot and image will run as root (${podText})`);
        if (!/^\d+$/.test(imageUser)) throw new ContainerConfigError(`container has runAsNonRoot and image has non-numeric user (${imageUser}), cannot verify user is non-root (${podText})`);
      }
    }
    if (uid === undefined && gid === undefined) return undefined;
    return `${uid ?? (imageUser || '0')}${gid === undefined ? '' : `:${gid}`}`;
  }

  /** Makes a volume's root writable as the kubelet leaves it: emptyDir 0777; a claim owned by fsGroup, setgid. */
  async #prepareVolume(volume: string, mode: 'emptyDir' | { fsGroup: number }): Promise<void> {
    const info = await this.#o.docker.getVolume(volume).inspect();
    const root = info.Mountpoint;
    try {
      if (mode === 'emptyDir') {
        chmodSync(root, 0o777);
        return;
      }
      // The kubelet's SetVolumeOwnership: group fsGroup on everything, group rw (and setgid on directories).
      const walk = (p: string) => {
        const st = lstatSync(p);
        if (st.isSymbolicLink()) return;
        chownSync(p, st.uid, mode.fsGroup);
        chmodSync(p, st.isDirectory() ? (st.mode & 0o7777) | 0o2070 : (st.mode & 0o7777) | 0o060);
        if (st.isDirectory()) for (const e of readdirSync(p)) walk(path.join(p, e));
      };
      walk(root);
    } catch (err) {
      throw new Error(`the Kubernetes stand-in sets volume permissions through the Docker volume's host path ${root} and could not: ${(err as Error).message}`);
    }
  }

  #tokenDir(pod: PodRef): string {
    const dir = path.join(this.#o.stateDir, 'tokens', pod.uid);
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    // A token that authenticates nowhere: the stand-in never hands out credentials to a pod.
    writeFileSync(path.join(dir, 'token'), 'kubernetes-stand-in-token-valid-nowhere', { mode: 0o644 });
    writeFileSync(path.join(dir, 'namespace'), pod.namespace, { mode: 0o644 });
    writeFileSync(path.join(dir, 'ca.crt'), '', { mode: 0o644 });
    return dir;
  }

  /**
   * A downwardAPI volume's files, as the kubelet writes them (each item's
   * field, the file mode `defaultMode`, 0644 unless set): a directory of the
   * pod's; the file alone for a `subPath`.
   */
  #downwardApi(pod: PodRef, volume: Spec, subPath: string | undefined): string {
    const dir = path.join(this.#o.stateDir, 'downward', pod.uid, volume.name as string);
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    const mode = (volume.downwardAPI.defaultMode as number | undefined) ?? 0o644;
    const names: Record<string, string> = { 'metadata.name': pod.name, 'metadata.namespace': pod.namespace, 'metadata.uid': pod.uid };
    for (const item of (volume.downwardAPI.items ?? []) as Spec[]) {
      const fieldPath = item.fieldRef.fieldPath as string;
      const keyed = /^metadata\.(annotations|labels)\['([^']+)'\]$/.exec(fieldPath);
      const value = keyed
        ? ((keyed[1] === 'labels' ? pod.labels : pod.annotations)?.[keyed[2]!] ?? '')
        : (names[fieldPath] ?? '');
      const file = path.join(dir, item.path as string);
      mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
      writeFileSync(file, value, { mode });
      chmodSync(file, mode);
    }
    return subPath === undefined ? dir : path.join(dir, subPath);
  }

  /** Docker volume names of a pod's emptyDir volumes. */
  emptyDirVolume(pod: PodRef, volume: string): string {
    return `k8s-standin-${this.#o.instance}-${pod.uid.slice(0, 8)}-${volume}`;
  }

  /**
   * Creates and starts the pod's container; returns its id. `isolated`: the
   * pod's network policies allow it no traffic, so it starts disconnected.
   */
  async start(pod: PodRef, spec: Spec, image: ImageInfo, isolated: boolean): Promise<string> {
    const c = spec.containers[0] as Spec;
    const psc = spec.securityContext ?? {};
    const sc = c.securityContext ?? {};
    const user = this.#user(pod, spec, c, image);
    const labels = { [STANDIN_LABEL]: this.#o.instance, [POD_LABEL]: `${pod.namespace}/${pod.name}` };
    const mounts: Dockerode.MountSettings[] = [];
    const tmpfs: Record<string, string> = {};
    const byName = new Map(((spec.volumes ?? []) as Spec[]).map((v) => [v.name as string, v]));
    for (const m of (c.volumeMounts ?? []) as Spec[]) {
      const v = byName.get(m.name)!;
      const readOnly = m.readOnly === true;
      if (v.persistentVolumeClaim) {
        const source = this.#o.claimVolume(pod.namespace, v.persistentVolumeClaim.claimName);
        if (!source) throw new ContainerConfigError(`persistentvolumeclaim "${v.persistentVolumeClaim.claimName}" not found`);
        if (psc.fsGroup !== undefined) await this.#prepareVolume(source, { fsGroup: psc.fsGroup });
        mounts.push({ Type: 'volume', Source: source, Target: m.mountPath, ReadOnly: readOnly || v.persistentVolumeClaim.readOnly === true, VolumeOptions: NO_COPY });
      } else if (v.emptyDir?.medium === 'Memory') {
        const size = parseQuantity(v.emptyDir.sizeLimit);
        tmpfs[m.mountPath] = `mode=1777${size ? `,size=${Math.floor(size)}` : ''}${readOnly ? ',ro' : ''}`;
      } else if (v.emptyDir) {
        const name = this.emptyDirVolume(pod, v.name);
        await this.#o.docker.createVolume({ Name: name, Labels: labels });
        await this.#prepareVolume(name, 'emptyDir');
        mounts.push({ Type: 'volume', Source: name, Target: m.mountPath, ReadOnly: readOnly, VolumeOptions: NO_COPY });
      } else if (v.projected) {
        mounts.push({ Type: 'bind', Source: this.#tokenDir(pod), Target: m.mountPath, ReadOnly: true });
      } else if (v.downwardAPI) {
        mounts.push({ Type: 'bind', Source: this.#downwardApi(pod, v, m.subPath || undefined), Target: m.mountPath, ReadOnly: true });
      }
    }
    const runtime = spec.runtimeClassName ? this.#o.runtimeClasses.get(spec.runtimeClassName) : undefined;
    const seccomp = sc.seccompProfile?.type ?? psc.seccompProfile?.type;
    const memory = parseQuantity(c.resources?.limits?.memory);
    const cpu = parseQuantity(c.resources?.limits?.cpu);
    const cpuRequest = parseQuantity(c.resources?.requests?.cpu);
    const groups = [...((psc.supplementalGroups ?? []) as number[]), ...(psc.fsGroup !== undefined ? [psc.fsGroup as number] : [])];
    const container = await this.#o.docker.createContainer({
      name: `k8s-standin-${this.#o.instance}_${c.name}_${pod.name}_${pod.namespace}_${pod.uid.slice(0, 8)}`,
      Image: c.image,
      Hostname: pod.name.slice(0, 63),
      ...(c.command ? { Entrypoint: c.command, Cmd: c.args ?? [] } : c.args ? { Cmd: c.args } : {}),
      Env: ((c.env ?? []) as Spec[]).map((e) => `${e.name}=${e.value ?? ''}`),
      ...(c.workingDir ? { WorkingDir: c.workingDir } : {}),
      ...(user ? { User: user } : {}),
      OpenStdin: c.stdin === true,
      StdinOnce: c.stdinOnce === true,
      Tty: c.tty === true,
      Labels: { ...labels, 'berth.standin.kubernetes.uid': pod.uid },
      HostConfig: {
        NetworkMode: this.#o.network,
        Mounts: mounts,
        Tmpfs: tmpfs,
        ReadonlyRootfs: sc.readOnlyRootFilesystem === true,
        CapAdd: sc.capabilities?.add ?? [],
        CapDrop: sc.capabilities?.drop ?? [],
        GroupAdd: groups.map(String),
        SecurityOpt: [
          ...(sc.allowPrivilegeEscalation === false ? ['no-new-privileges:true'] : []),
          ...(seccomp === 'Unconfined' ? ['seccomp=unconfined'] : []),
        ],
        ...(memory ? { Memory: Math.floor(memory), MemorySwap: Math.floor(memory) } : {}),
        ...(cpu ? { NanoCpus: Math.round(cpu * 1e9) } : {}),
        // The kubelet's cpu.shares: 1024 per requested core, at least 2.
        ...(cpuRequest ? { CpuShares: Math.max(2, Math.round(cpuRequest * 1024)) } : {}),
        ...(runtime ? { Runtime: runtime } : {}),
      },
    });
    if (isolated) await this.#o.docker.getNetwork(this.#o.network).disconnect({ Container: container.id, Force: true });
    await container.start();
    return container.id;
  }

  /** SIGTERM, then SIGKILL after `graceSeconds`, then removes the container and the pod's emptyDir volumes. */
  async stop(pod: PodRef, spec: Spec, containerId: string | undefined, graceSeconds: number): Promise<void> {
    if (containerId) {
      const c = this.#o.docker.getContainer(containerId);
      await c.stop({ t: Math.max(0, Math.floor(graceSeconds)) }).catch(() => undefined);
      await c.remove({ force: true, v: false }).catch(() => undefined);
    }
    await this.removePodVolumes(pod, spec);
  }

  async removePodVolumes(pod: PodRef, spec: Spec): Promise<void> {
    for (const v of (spec.volumes ?? []) as Spec[]) {
      if (v.emptyDir && v.emptyDir.medium !== 'Memory') {
        await this.#o.docker.getVolume(this.emptyDirVolume(pod, v.name)).remove().catch(() => undefined);
      }
    }
  }
}
