/**
 * `terminal.container_disk` on the docker backend. Docker can cap a
 * container's writable layer (`HostConfig.StorageOpt.size`) and a local
 * volume (`size` driver option) only on some storage setups: overlay2 on XFS
 * mounted with `pquota` (where both work), btrfs, zfs, devicemapper. On the
 * common overlay2-on-ext4 host the daemon refuses the option outright.
 *
 * Which one this daemon is shows in its answer to the first create that asks
 * for a limit, so nothing is probed ahead: each part (layer, volumes) starts
 * `unknown`, is asked for, and turns `enforced` when a create succeeds or
 * `unsupported` when the daemon refuses the option. Then, by
 * `docker.disk_limit`:
 * - `auto` (default): run without the limit the daemon cannot apply and say
 *   so once in the log (a host's disk is then the only bound);
 * - `require`: refuse to create the container, naming the fix;
 * - `off`: never ask for a limit.
 */
import type { DiskLimitMode } from '../../../common/config.js';
import { FailedPreconditionError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { dockerMessage } from './docker-errors.js';

export type { DiskLimitMode };

export type DiskLimitState = 'unknown' | 'enforced' | 'unsupported' | 'off';

/** The part of the container a refusal is about. */
export type DiskLimitPart = 'layer' | 'volumes';

/** Sizes to ask for in one create; a part left out gets no limit. */
export interface DiskLimitRequest {
  readonly layerMiB?: number;
  readonly volumeMiB?: number;
}

const PART_TEXT: Readonly<Record<DiskLimitPart, string>> = {
  layer: "a container's writable layer",
  volumes: "a task's named volumes (/workspace and home)",
};

/**
 * Which part a create error refuses a disk limit for, or undefined for any
 * other error. The messages are the daemon's (moby): the overlay2 driver's
 * "--storage-opt is supported only for overlay over xfs with 'pquota' mount
 * option", other drivers' "Storage Opt not supported" / "unknown option
 * size", and the local volume driver's "quota size requested but no quota
 * support" (or, before Docker 20.10, an invalid `size` option).
 */
export function diskLimitRefusal(err: unknown): DiskLimitPart | undefined {
  const message = dockerMessage(err);
  if (/quota size requested|invalid option:? (key: )?"?size"?/i.test(message)) return 'volumes';
  if (/--storage-opt|storage[- ]opt(ion)?s? (is |are )?not supported|unknown option size/i.test(message)) return 'layer';
  return undefined;
}

export interface DiskLimitsOptions {
  readonly mode: DiskLimitMode;
  /** terminal.container_disk, MiB. */
  readonly sizeMiB: number;
  /** Whether the containers mount per-task named volumes (terminal.container_persistent). */
  readonly volumes: boolean;
  /** How messages name the daemon. */
  readonly daemon: string;
  readonly logger: Logger;
}

export class DiskLimits {
  readonly #options: DiskLimitsOptions;
  readonly #state: Record<DiskLimitPart, DiskLimitState>;

  constructor(options: DiskLimitsOptions) {
    this.#options = options;
    const initial: DiskLimitState = options.mode === 'off' ? 'off' : 'unknown';
    this.#state = { layer: initial, volumes: options.volumes ? initial : 'off' };
  }

  /** terminal.container_disk, MiB. */
  get sizeMiB(): number {
    return this.#options.sizeMiB;
  }

  /** What is known of each part: asked for and applied, refused by the daemon, or not asked for. */
  get state(): Readonly<Record<DiskLimitPart, DiskLimitState>> {
    return { ...this.#state };
  }

  /** The sizes the next create asks for. */
  request(): DiskLimitRequest {
    const ask = (part: DiskLimitPart) => this.#state[part] === 'unknown' || this.#state[part] === 'enforced';
    return {
      ...(ask('layer') ? { layerMiB: this.#options.sizeMiB } : {}),
      ...(ask('volumes') ? { volumeMiB: this.#options.sizeMiB } : {}),
    };
  }

  /** A create that asked for `request` succeeded: those limits hold. */
  applied(request: DiskLimitRequest): void {
    if (request.layerMiB !== undefined) this.#state.layer = 'enforced';
    if (request.volumeMiB !== undefined) this.#state.volumes = 'enforced';
  }

  /**
   * A create that asked for `request` failed with `err`. Returns true when
   * the daemon refused a disk limit it had been asked for and the create
   * should be tried again without it (`auto`); throws the reason in
   * `require` mode; false for any other error.
   */
  refused(err: unknown, request: DiskLimitRequest): boolean {
    const part = diskLimitRefusal(err);
    if (!part) return false;
    const asked = part === 'layer' ? request.layerMiB : request.volumeMiB;
    if (asked === undefined) return false;
    const o = this.#options;
    const what = `terminal.container_disk (${o.sizeMiB} MiB) cannot be applied to ${PART_TEXT[part]}: ${o.daemon} says "${dockerMessage(err)}"`;
    if (o.mode === 'require') {
      throw new FailedPreconditionError(
        `${what}. Docker enforces disk limits on overlay2 only when its data root is on XFS mounted with pquota ` +
          '(or with the btrfs, zfs or devicemapper drivers); move /var/lib/docker there, or set docker.disk_limit: auto ' +
          'to run without a disk limit where the daemon cannot apply one.',
        { cause: err },
      );
    }
    // Creates running at once may all be refused: say it once.
    if (this.#state[part] === 'unsupported') return true;
    this.#state[part] = 'unsupported';
    o.logger.warn(
      { part, daemon: o.daemon, reason: dockerMessage(err) },
      `${what}; running without it (the host's disk is the only bound). Set docker.disk_limit: require to refuse instead.`,
    );
    return true;
  }
}
