/**
 * Which provider serves web_search and which web_extract, from `web.*` and
 * the dispatcher's environment, as upstream picks them: the capability's own
 * key (`web.search_backend`, `web.extract_backend`), else `web.backend` when
 * that provider has the capability, else the first keyed provider whose
 * variables are set. The keyless `http` extractor makes the dispatcher fetch
 * pages itself, so it is used only when named.
 */
import { parseCidr } from '../../../common/cidr.js';
import type { WebBackendName, WebConfig } from '../../../common/config.js';
import { HttpExtractProvider } from './http-extract-provider.js';
import type { Resolver } from './safe-fetch.js';
import { SearxngProvider } from './searxng-provider.js';
import { TavilyProvider } from './tavily-provider.js';
import { providerEnv, type WebProvider } from './web-provider.js';

export type WebCapability = 'search' | 'extract';

/** Providers picked without being named, in preference order. */
const AUTO_ORDER: Readonly<Record<WebCapability, readonly WebBackendName[]>> = {
  search: ['tavily', 'searxng'],
  extract: ['tavily'],
};

/** The outcome of the choice for one capability: a usable provider, or why there is none. */
export type WebSelection =
  | { readonly provider: WebProvider; readonly reason?: undefined; readonly envVars: readonly string[] }
  | { readonly provider?: undefined; readonly reason: string; readonly envVars: readonly string[] };

export interface WebBackendsOptions {
  /** The dispatcher's environment (credentials and instance URLs). */
  readonly env: NodeJS.ProcessEnv;
  /** Name resolution of the http extractor; tests inject one. */
  readonly resolve?: Resolver;
}

export class WebBackends {
  readonly #config: WebConfig;
  readonly #providers: ReadonlyMap<WebBackendName, WebProvider>;

  constructor(config: WebConfig, options: WebBackendsOptions) {
    this.#config = config;
    const env = providerEnv(options.env);
    const http = new HttpExtractProvider({
      allow: config.egress_allow.map((c) => parseCidr(c)!),
      timeoutMs: config.timeout * 1000,
      ...(options.resolve ? { resolve: options.resolve } : {}),
    });
    this.#providers = new Map<WebBackendName, WebProvider>([
      ['searxng', new SearxngProvider(env)],
      ['tavily', new TavilyProvider(env)],
      ['http', http],
    ]);
  }

  /** The provider for a capability now (environment read on every call; no network). */
  select(capability: WebCapability): WebSelection {
    const supports = (p: WebProvider) => (capability === 'search' ? p.supportsSearch() : p.supportsExtract());
    const ownKey = capability === 'search' ? this.#config.search_backend : this.#config.extract_backend;
    const shared = this.#config.backend !== '' && supports(this.#providers.get(this.#config.backend)!) ? this.#config.backend : '';
    const named = ownKey !== '' ? ownKey : shared;
    if (named !== '') {
      const provider = this.#providers.get(named)!;
      const key = ownKey !== '' ? `web.${capability}_backend` : 'web.backend';
      if (provider.isAvailable()) return { provider, envVars: provider.envVars };
      return { reason: `${key} is ${named}, but ${provider.unavailableReason()}`, envVars: provider.envVars };
    }
    const candidates = AUTO_ORDER[capability].map((name) => this.#providers.get(name)!);
    const envVars = [...new Set(candidates.flatMap((p) => p.envVars))];
    const provider = candidates.find((p) => p.isAvailable());
    if (provider !== undefined) return { provider, envVars };
    const names = capability === 'search' ? 'searxng, tavily' : 'tavily, http';
    return {
      reason: `no web ${capability} provider: set ${envVars.join(' or ')}, or name one (${names}) in web.${capability}_backend`,
      envVars,
    };
  }
}
