/**
 * `terminal.container_disk` where Docker cannot enforce it (`docker.disk_limit:
 * auto` on overlay2 over ext4, or local volumes without quota support): Berth
 * measures each task's disk and refuses the task's next command, background
 * process or file write once the parts Docker leaves unbounded add up to more
 * than the limit. The task keeps its container and files (reads still work);
 * ending the task frees its space.
 *
 * What is measured, and why this way:
 * - the writable layer: the engine's own count (`inspect` with `size`, SizeRw),
 *   made on the host, so nothing in the sandbox can hide from it;
 * - the named volumes (/workspace and the home): `du -sx` of their mount
 *   points, run in the container (a docker exec, not through the agent) as
 *   the task's own uid. `GET /system/df` would count them too, but walks
 *   every image, container and volume on the host (and, before API 1.42,
 *   cannot be narrowed to volumes), for one task's answer; a `du` of the
 *   task's own directories costs what they hold. It cannot run with more
 *   rights than the task's (the container's capability bounding set is
 *   empty), so a directory the task made unreadable (`chmod 000`) would hide
 *   what it holds: `du` then fails, and the task is refused until it makes
 *   its files readable again (fail closed).
 *
 * A measure is kept for a few seconds, so a burst of calls costs one.
 */
import type Dockerode from 'dockerode';
import { ResourceExhaustedError, type CAPACITY_SETTINGS } from '../../../common/errors.js';
import { execInContainer } from './container-exec.js';
import type { DiskLimitPart, DiskLimitState } from './disk-limits.js';

/** A capacity setting: its refusal reaches the caller as RESOURCE_EXHAUSTED, not as a tool result. */
export const CONTAINER_DISK_SETTING: (typeof CAPACITY_SETTINGS)[number] = 'terminal.container_disk';
const MIB = 1024 * 1024;

export interface DiskUsage {
  /** The writable layer, bytes; undefined when Docker enforces the limit there (not measured). */
  readonly layerBytes?: number;
  /** The named volumes together, bytes; undefined when not measured. */
  readonly volumeBytes?: number;
  readonly totalBytes: number;
}

export interface DiskMeterOptions {
  readonly docker: Dockerode;
  /** terminal.container_disk, MiB. */
  readonly limitMiB: number;
  /** What Docker enforces (disk-limits.ts): only `unsupported` parts are measured. */
  readonly parts: () => Readonly<Record<DiskLimitPart, DiskLimitState>>;
  /** The mount points of the task's named volumes (empty when there are none). */
  readonly volumeDirs: readonly string[];
  /** How long one measure is reused. */
  readonly cacheMs: number;
}

/** Parses `du -sx --block-size=1` lines ("BYTES\tPATH"); throws on anything else. */
export function parseDu(text: string, dirs: readonly string[]): number {
  let total = 0;
  const seen = new Set<string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const m = /^(\d{1,20})\t(.+)$/.exec(line);
    if (!m || !dirs.includes(m[2]!) || seen.has(m[2]!)) throw new Error(`unexpected du output line ${JSON.stringify(line.slice(0, 200))}`);
    seen.add(m[2]!);
    total += Number(m[1]);
  }
  if (seen.size !== dirs.length) throw new Error(`du measured ${seen.size} of ${dirs.length} directories`);
  return total;
}

/** du could not read some of the task's files: a measure that would undercount. */
class UnreadableError extends Error {}

export class DiskMeter {
  readonly #o: DiskMeterOptions;
  readonly #cache = new Map<string, { readonly at: number; readonly usage: Promise<DiskUsage> }>();

  constructor(options: DiskMeterOptions) {
    this.#o = options;
  }

  /** The parts Berth measures now (those Docker was found unable to bound). */
  measuredParts(): DiskLimitPart[] {
    const parts = this.#o.parts();
    return (['layer', 'volumes'] as const).filter((p) => parts[p] === 'unsupported' && (p === 'layer' || this.#o.volumeDirs.length > 0));
  }

  /** What container `containerId` uses of the measured parts; undefined when nothing is measured. */
  async usage(containerId: string, user: string): Promise<DiskUsage | undefined> {
    if (this.measuredParts().length === 0) return undefined;
    const cached = this.#cache.get(containerId);
    if (cached && Date.now() - cached.at < this.#o.cacheMs) return cached.usage;
    const usage = this.#measure(containerId, user);
    this.#cache.set(containerId, { at: Date.now(), usage });
    // A failed measure is not kept.
    usage.catch(() => this.#cache.delete(containerId));
    return usage;
  }

  /** Forgets a container's measure (it was removed or replaced). */
  forget(containerId: string): void {
    this.#cache.delete(containerId);
  }

  /**
   * Throws RESOURCE_EXHAUSTED naming the setting when the task in container
   * `containerId` (whose commands run as `user`) holds more than the limit,
   * or hides files from the measure. A measure the engine fails lets the call
   * through (the container's own trouble shows in the call).
   */
  async check(containerId: string, user: string, task: string): Promise<void> {
    const usage = await this.usage(containerId, user).catch((err: unknown) => {
      if (!(err instanceof UnreadableError)) return undefined;
      throw new ResourceExhaustedError(
        `${CONTAINER_DISK_SETTING}: the disk task ${task} uses cannot be measured (Docker cannot enforce the limit of ` +
          `${this.#o.limitMiB} MiB on this host's storage, so Berth measures it): ${err.message}. Its commands and file ` +
          `writes are refused, as a task's past the limit are. ${this.#wayOut()}`,
      );
    });
    if (!usage) return;
    const limitBytes = this.#o.limitMiB * MIB;
    if (usage.totalBytes <= limitBytes) return;
    const parts = [
      usage.layerBytes !== undefined ? `${mib(usage.layerBytes)} MiB outside the volumes` : undefined,
      usage.volumeBytes !== undefined ? `${mib(usage.volumeBytes)} MiB in ${this.#o.volumeDirs.join(' and ')}` : undefined,
    ].filter((p) => p !== undefined);
    throw new ResourceExhaustedError(
      `${CONTAINER_DISK_SETTING}: task ${task} uses ${mib(usage.totalBytes)} MiB of disk (${parts.join(', ')}), ` +
        `past its limit of ${this.#o.limitMiB} MiB, which Docker cannot enforce on this host's storage, so Berth ` +
        `refuses its commands and file writes (reading files still works). ${this.#wayOut()}`,
    );
  }

  /** What frees the space: the container goes with the task; its volumes are kept for its return until removed. */
  #wayOut(): string {
    const kept =
      this.#o.volumeDirs.length > 0
        ? ` (files in ${this.#o.volumeDirs.join(' and ')} are kept in its volumes for the task's return: an operator ` +
          'frees them by removing the volumes labelled with its berth.tenant and berth.task)'
        : '';
    return `End the task to free its container's disk${kept}, or raise terminal.container_disk.`;
  }

  async #measure(containerId: string, user: string): Promise<DiskUsage> {
    const measured = this.measuredParts();
    const container = this.#o.docker.getContainer(containerId);
    const [layerBytes, volumeBytes] = await Promise.all([
      measured.includes('layer') ? container.inspect({ size: true } as Dockerode.ContainerInspectOptions).then((i) => Number((i as { SizeRw?: number }).SizeRw ?? 0)) : undefined,
      measured.includes('volumes') ? this.#du(container, user) : undefined,
    ]);
    return {
      ...(layerBytes !== undefined ? { layerBytes } : {}),
      ...(volumeBytes !== undefined ? { volumeBytes } : {}),
      totalBytes: (layerBytes ?? 0) + (volumeBytes ?? 0),
    };
  }

  async #du(container: Dockerode.Container, user: string): Promise<number> {
    const dirs = this.#o.volumeDirs;
    // Bounded: the output is two short lines; anything longer is not du's.
    const r = await execInContainer(container, { cmd: ['du', '-sx', '--block-size=1', '--', ...dirs], user, env: ['LC_ALL=C'] });
    if (r.exitCode !== 0) throw new UnreadableError(r.stderrLine || `du exited with status ${r.exitCode}`);
    return parseDu(r.stdout, dirs);
  }
}

function mib(bytes: number): number {
  return Math.round(bytes / MIB);
}
