/**
 * API key → tenant. Keys are stored as SHA-256 hashes; with no tenants
 * configured every caller is the single `default` tenant (single-user mode).
 */
import { timingSafeEqual } from 'node:crypto';
import type { Metadata, ServerMiddleware } from 'nice-grpc';
import type { BackendName, BerthConfig } from '../common/config.js';
import { ConfigError, hashApiKey } from '../common/config.js';
import { UnauthenticatedError } from '../common/errors.js';
import type { TenantPolicy } from './executors/executor-router.js';
import { knownToolsetNames, resolveToolsets } from './registry/toolsets.js';

export const DEFAULT_TENANT = 'default';

export interface TenantContext {
  readonly tenant: string;
}

interface TenantEntry {
  readonly id: string;
  readonly keyHash: Buffer;
  readonly allowedBackends?: readonly BackendName[];
  /** `toolsets` as configured (names checked at start); resolved on use, so toolsets registered later count. */
  readonly toolsets?: readonly string[];
}

/** Compares two key hashes of equal length; constant time in production. */
export type KeyHashCompare = (stored: Buffer, presented: Buffer) => boolean;

export class TenantDirectory {
  readonly #entries: TenantEntry[];
  readonly #backend: BackendName;
  readonly #compare: KeyHashCompare;

  /** `compare` replaces `crypto.timingSafeEqual` (tests count what it is given). */
  constructor(config: Pick<BerthConfig, 'tenants' | 'terminal'>, options: { compare?: KeyHashCompare } = {}) {
    this.#backend = config.terminal.backend;
    this.#compare = options.compare ?? timingSafeEqual;
    const problems: string[] = [];
    for (const t of config.tenants) {
      for (const name of t.toolsets ? resolveToolsets(t.toolsets).unknown : []) {
        problems.push(`tenants[${t.id}].toolsets: unknown toolset '${name}'`);
      }
    }
    if (problems.length > 0) {
      throw new ConfigError(
        `invalid config:\n${problems.map((p) => `✖ ${p}`).join('\n')}\n` +
          `  known toolset names: ${knownToolsetNames().join(', ')}`,
      );
    }
    this.#entries = config.tenants.map((t) => ({
      id: t.id,
      keyHash: Buffer.from(t.api_key_sha256, 'hex'),
      ...(t.allowed_backends ? { allowedBackends: t.allowed_backends } : {}),
      ...(t.toolsets ? { toolsets: [...t.toolsets] } : {}),
    }));
  }

  get multiTenant(): boolean {
    return this.#entries.length > 0;
  }

  /** Resolves the caller from `authorization: Bearer <key>`; throws UNAUTHENTICATED. */
  authenticate(metadata: Metadata): string {
    if (!this.multiTenant) return DEFAULT_TENANT;
    const header = metadata.get('authorization');
    const match = typeof header === 'string' ? /^Bearer\s+(\S+)$/i.exec(header) : null;
    if (!match) throw new UnauthenticatedError('missing "authorization: Bearer <api key>" metadata');
    const presented = Buffer.from(hashApiKey(match[1]!), 'hex');
    // Compare against every entry in constant time each, so timing says nothing about which matched.
    let found: string | undefined;
    for (const e of this.#entries) {
      if (this.#compare(e.keyHash, presented) && found === undefined) found = e.id;
    }
    if (found === undefined) throw new UnauthenticatedError('unknown API key');
    return found;
  }

  policyFor(tenant: string): TenantPolicy {
    const entry = this.#entries.find((e) => e.id === tenant);
    return { backend: this.#backend, ...(entry?.allowedBackends ? { allowedBackends: entry.allowedBackends } : {}) };
  }

  /**
   * The tools a tenant may list and call (its `toolsets`, resolved now), or
   * undefined when it has no `toolsets` key (every tool).
   */
  toolsFor(tenant: string): ReadonlySet<string> | undefined {
    const toolsets = this.#entries.find((e) => e.id === tenant)?.toolsets;
    return toolsets === undefined ? undefined : resolveToolsets(toolsets).tools;
  }

  /** Server middleware that adds `tenant` to every call's context. */
  middleware(): ServerMiddleware<TenantContext> {
    const authenticate = (metadata: Metadata) => this.authenticate(metadata);
    return async function* tenantMiddleware(call, context) {
      const tenant = authenticate(context.metadata);
      return yield* call.next(call.request, { ...context, tenant });
    };
  }
}
