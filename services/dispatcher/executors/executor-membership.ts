/**
 * The dispatcher's executor membership: the static `executors:` list plus
 * every address a DNS name resolves to (`executor_discovery:`), re-resolved
 * periodically. Replicas that resolve the same name see the same members and
 * so make the same rendezvous choice without talking to each other.
 *
 * A failed resolution (timeout, server failure) keeps the members from the
 * last good answer: a DNS hiccup must not empty the fleet. A name that does
 * not exist (NXDOMAIN, or a headless Service with no ready pods) means no
 * members from that source.
 */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { BackendName } from '../../common/config.js';
import type { Logger } from '../../common/logging.js';

/** One discovery source: a DNS name whose addresses are executors of one backend. */
export interface DiscoverySource<Tls> {
  readonly dns: string;
  readonly port: number;
  readonly backend: BackendName;
  readonly tls?: Tls;
}

/** A member found by discovery: `host:port` (IPv6 bracketed), its backend and TLS. */
export interface DiscoveredMember<Tls> {
  readonly address: string;
  readonly backend: BackendName;
  readonly tls?: Tls;
}

/** Resolves a name to all its addresses; throws with `code` ENOTFOUND/ENODATA when the name has none. */
export type AddressResolver = (name: string) => Promise<string[]>;

/** All A and AAAA records through the system resolver (what the container's resolv.conf and /etc/hosts say). */
export const systemResolver: AddressResolver = async (name) =>
  (await lookup(name, { all: true, verbatim: true })).map((a) => a.address);

const NO_SUCH_NAME = new Set(['ENOTFOUND', 'ENODATA', 'EAI_NONAME', 'EAI_NODATA']);

export function hostPort(ip: string, port: number): string {
  return isIP(ip) === 6 ? `[${ip}]:${port}` : `${ip}:${port}`;
}

export interface MembershipChange<Tls> {
  readonly added: readonly DiscoveredMember<Tls>[];
  readonly removed: readonly string[];
}

/**
 * Resolves the discovery sources and reports what changed since the last
 * round; the caller connects added members and retires removed ones.
 */
export class ExecutorDiscovery<Tls> {
  readonly #sources: readonly DiscoverySource<Tls>[];
  readonly #resolve: AddressResolver;
  readonly #logger: Logger;
  /** Per source: the addresses of its last good answer. */
  readonly #last: Array<Set<string>>;
  readonly #members = new Map<string, DiscoveredMember<Tls>>();

  constructor(sources: readonly DiscoverySource<Tls>[], options: { resolve?: AddressResolver; logger: Logger }) {
    this.#sources = sources;
    this.#resolve = options.resolve ?? systemResolver;
    this.#logger = options.logger;
    this.#last = sources.map(() => new Set());
  }

  /** Addresses currently in the membership from discovery. */
  get members(): readonly DiscoveredMember<Tls>[] {
    return [...this.#members.values()];
  }

  /** One resolution round over every source. */
  async refresh(): Promise<MembershipChange<Tls>> {
    await Promise.all(
      this.#sources.map(async (source, i) => {
        try {
          const ips = await this.#resolve(source.dns);
          this.#last[i] = new Set(ips.map((ip) => hostPort(ip, source.port)));
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code ?? '';
          if (NO_SUCH_NAME.has(code)) {
            this.#last[i] = new Set();
          } else {
            this.#logger.warn(
              { dns: source.dns, error: (err as Error).message },
              `executor discovery: cannot resolve ${source.dns}; keeping its ${this.#last[i]!.size} known executor(s)`,
            );
          }
        }
      }),
    );
    const next = new Map<string, DiscoveredMember<Tls>>();
    this.#sources.forEach((source, i) => {
      for (const address of this.#last[i]!) {
        if (!next.has(address)) next.set(address, { address, backend: source.backend, ...(source.tls ? { tls: source.tls } : {}) });
      }
    });
    const added = [...next.values()].filter((m) => !this.#members.has(m.address));
    const removed = [...this.#members.keys()].filter((a) => !next.has(a));
    this.#members.clear();
    for (const [a, m] of next) this.#members.set(a, m);
    if (added.length > 0 || removed.length > 0) {
      this.#logger.info(
        { added: added.map((m) => m.address), removed, members: next.size },
        'executor membership changed',
      );
    }
    return { added, removed };
  }
}
