/**
 * Prometheus metrics (prom-client). Every server process gets its own
 * registry, never prom-client's global one: tests start many servers in one
 * process, and in `berth serve` the dispatcher and the executor register on
 * one registry behind one endpoint.
 *
 * Recording sits on every call's path, so the series of each label set are
 * looked up once and kept ({@link Series}): recording is then two map
 * lookups and an increment. Label values must be bounded: tool names the
 * registry knows, status codes, backend names, never task ids or secrets.
 */
import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';

export type { Registry } from 'prom-client';

/**
 * prom-client, loaded the first time a registry is made: a server with
 * metrics off never makes one, and so never loads prom-client (nor the
 * OpenTelemetry API it requires), which is memory every server would hold.
 */
export const promClient = (): typeof PromClient => createRequire(import.meta.url)('prom-client') as typeof PromClient;

/** A registry with Node's default process metrics (CPU, memory, event loop lag, GC, handles). */
export function createMetricsRegistry(options: { processMetrics?: boolean } = {}): Registry {
  const { Registry, collectDefaultMetrics } = promClient();
  const registry = new Registry();
  if (options.processMetrics ?? true) collectDefaultMetrics({ register: registry });
  return registry;
}

interface MetricSpec<L extends string> {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly L[];
}

/** The registry's metric of that name, or a new one registered there (a second server on one registry shares it). */
function registered<M>(registry: Registry, name: string, make: () => M): M {
  return (registry.getSingleMetric(name) as M | undefined) ?? make();
}

export function counter<L extends string>(registry: Registry, spec: MetricSpec<L>): Counter<L> {
  return registered(registry, spec.name, () => new (promClient().Counter)({ ...spec, registers: [registry] }));
}

/** `collect`: sets the gauge's values at each scrape (for levels read from elsewhere, e.g. a pool's size). */
export function gauge<L extends string>(registry: Registry, spec: MetricSpec<L> & { readonly collect?: (this: Gauge<L>) => void }): Gauge<L> {
  return registered(registry, spec.name, () => new (promClient().Gauge)({ ...spec, registers: [registry] }));
}

export function histogram<L extends string>(
  registry: Registry,
  spec: MetricSpec<L> & { readonly buckets: readonly number[] },
): Histogram<L> {
  return registered(registry, spec.name, () => new (promClient().Histogram)({ ...spec, buckets: [...spec.buckets], registers: [registry] }));
}

/**
 * The children of one metric by two label values, each made on first use
 * and kept. `make` turns the two keys into the child (and so into labels);
 * keys must come from a bounded set.
 */
export class Series<C, A extends string = string, B extends string | number = string> {
  readonly #make: (a: A, b: B) => C;
  readonly #children = new Map<A, Map<B, C>>();

  constructor(make: (a: A, b: B) => C) {
    this.#make = make;
  }

  get(a: A, b: B): C {
    let inner = this.#children.get(a);
    if (inner === undefined) {
      inner = new Map();
      this.#children.set(a, inner);
    }
    let child = inner.get(b);
    if (child === undefined) {
      child = this.#make(a, b);
      inner.set(b, child);
    }
    return child;
  }
}
