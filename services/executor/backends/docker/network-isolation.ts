/**
 * Installs and removes what `docker.network: isolated` needs on the Docker
 * host: Berth's iptables/ip6tables chains (layout in network-policy.ts) and
 * one Docker network per policy. The executor runs as root next to dockerd;
 * where it cannot install the rules it refuses to start, never falling back
 * to the plain bridge.
 *
 * Lifetime: rules go in at start (replacing any left by an executor killed
 * with -9, atomically, so nothing is open in between) and come out on close,
 * but only for a network that Docker agrees to remove: a network another
 * executor's containers still use keeps its network and its rules. A Berth
 * bridge whose chain is gone meets BERTH-FORWARD's final DROP: closed, not open.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { networkInterfaces } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import { promisify } from 'node:util';
import type Dockerode from 'dockerode';
import type { IpFamily } from '../../../common/cidr.js';
import { FailedPreconditionError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { dockerError, dockerMessage, isConflict, isNotFound } from './docker-errors.js';
import {
  CHAIN_FORWARD,
  NETWORK_LABEL,
  NETWORK_POLICY_LABEL,
  bridgeName,
  buildInputChainRestore,
  buildNetworkChainRestore,
  embeddedDnsUpstreams,
  forwardEntry,
  networkChain,
  networkCreateOptions,
  networkName,
  parentJumps,
  rulesFromLabel,
  rulesId,
  tenantPolicy,
  type NetworkPolicy,
  type NetworkRules,
  type TenantNetworkOverride,
} from './network-policy.js';

const run = promisify(execFile);
/** Docker's embedded DNS, inside each container on a user-defined network. */
const EMBEDDED_DNS = '127.0.0.11/32';
/** How long a create that lost a race waits for the winner's network to be found by name: 50 × 100 ms. */
const RACE_LOOKUPS = 50;
const RACE_LOOKUP_MS = 100;

export interface NetworkIsolationOptions {
  readonly docker: Dockerode;
  readonly daemon: string;
  /** docker.egress / docker.egress_allow. */
  readonly operator: NetworkPolicy;
  /** tenants[].network from the executor's own config, by tenant id. */
  readonly tenants: Readonly<Record<string, TenantNetworkOverride>>;
  /** `--dns` servers from terminal.docker_extra_args (the embedded resolver forwards to them). */
  readonly extraDns: readonly string[];
  readonly logger: Logger;
  /** Default /etc/resolv.conf. */
  readonly resolvConfPath?: string;
}

/** One finding of {@link NetworkIsolation.verify}, for `berth doctor`. */
export interface IsolationCheck {
  readonly ok: boolean;
  readonly text: string;
}

function binary(family: IpFamily): string {
  return family === 4 ? 'iptables' : 'ip6tables';
}

async function iptables(family: IpFamily, args: readonly string[]): Promise<void> {
  await run(binary(family), ['-w', '5', ...args], { timeout: 30_000 });
}

async function succeeds(family: IpFamily, args: readonly string[]): Promise<boolean> {
  return iptables(family, args).then(
    () => true,
    () => false,
  );
}

async function restore(family: IpFamily, text: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const child = spawn(`${binary(family)}-restore`, ['--noflush'], { stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`${binary(family)}-restore exited ${code}: ${stderr.trim()}`)),
    );
    child.stdin.end(text);
  });
}

/** The host's own addresses, to tell which resolvers are reached through INPUT rather than FORWARD. */
function hostAddresses(): Set<string> {
  return new Set(
    Object.values(networkInterfaces())
      .flat()
      .map((a) => a?.address.replace(/%.*$/, ''))
      .filter((a): a is string => a !== undefined),
  );
}

/** Where Docker's embedded DNS forwards to, and which of those are this host's own addresses. */
async function dnsUpstreams(o: NetworkIsolationOptions): Promise<string[]> {
  const text = await readFile(o.resolvConfPath ?? '/etc/resolv.conf', 'utf8').catch(() => '');
  const daemonDns = await readFile('/etc/docker/daemon.json', 'utf8')
    .then((t) => (JSON.parse(t) as { dns?: unknown }).dns)
    .catch(() => undefined);
  return embeddedDnsUpstreams(text, [...o.extraDns, ...(Array.isArray(daemonDns) ? daemonDns.map(String) : [])]);
}

export class NetworkIsolation {
  readonly families: readonly IpFamily[];
  readonly #o: NetworkIsolationOptions;
  /** This executor's networks: the operator's rules and each tenant's, by id. */
  readonly #policies: ReadonlyMap<string, NetworkRules>;
  readonly #forwardParent: Readonly<Record<IpFamily, string>>;
  readonly #networks = new Map<string, Promise<string>>();
  readonly #resolvers: readonly string[];

  private constructor(
    o: NetworkIsolationOptions,
    families: IpFamily[],
    forwardParent: Record<IpFamily, string>,
    policies: Map<string, NetworkRules>,
    resolvers: readonly string[],
  ) {
    this.#o = o;
    this.#resolvers = resolvers;
    this.families = families;
    this.#forwardParent = forwardParent;
    this.#policies = policies;
  }

  /**
   * Installs every chain for the operator's policy and each tenant's, or
   * throws FailedPreconditionError saying what to do. Docker need not
   * answer yet: the rules name bridges, which exist once networks do.
   */
  static async install(o: NetworkIsolationOptions): Promise<NetworkIsolation> {
    const refuse = (why: string) =>
      new FailedPreconditionError(
        `docker.network: isolated cannot be enforced on this host: ${why}. The executor must run as root ` +
          '(CAP_NET_ADMIN) on the Docker host, beside a dockerd that manages iptables; or set docker.network: bridge ' +
          'to run without network isolation',
      );
    try {
      await iptables(4, ['-S', 'INPUT']);
    } catch (err) {
      throw refuse(`iptables does not work here (${(err as Error).message.split('\n')[0]}); install it (apt-get install -y iptables)`);
    }
    if (!(await succeeds(4, ['-C', 'FORWARD', '-j', 'DOCKER-USER']))) {
      throw refuse(
        'FORWARD does not jump to DOCKER-USER (dockerd has not started yet, runs with iptables: false, or is not on this host)',
      );
    }
    const families: IpFamily[] = [4];
    const forwardParent: Record<IpFamily, string> = { 4: 'DOCKER-USER', 6: 'FORWARD' };
    if (existsSync('/proc/net/if_inet6') && (await succeeds(6, ['-S', 'INPUT']))) {
      families.push(6);
      const { stdout } = await run('ip6tables', ['-w', '5', '-S']);
      if (/^-N DOCKER-USER$/m.test(stdout)) forwardParent[6] = 'DOCKER-USER';
    } else if (existsSync('/proc/net/if_inet6')) {
      o.logger.warn('docker.network: isolated: ip6tables does not work on this host, so IPv6 traffic of containers is not filtered');
    }
    const resolvers = await dnsUpstreams(o);
    const policies = new Map<string, NetworkRules>();
    for (const override of [undefined, ...Object.values(o.tenants)]) {
      const rules = { policy: tenantPolicy(o.operator, override), resolvers };
      policies.set(rulesId(rules), rules);
    }
    const isolation = new NetworkIsolation(o, families, forwardParent, policies, resolvers);
    // Another executor on this host that closes meanwhile removes the shared chains when it sees no Berth network
    // (this one's are made later, on first use), which can pull a chain from under a rule going in: try again.
    for (let attempt = 1; ; attempt++) {
      try {
        await isolation.#installRules();
        break;
      } catch (err) {
        if (attempt >= 3) throw refuse(`installing its rules failed (${(err as Error).message.trim().split('\n')[0]})`);
        o.logger.debug({ err, attempt }, 'network isolation: installing the rules failed; trying again');
        await new Promise((resolve) => setTimeout(resolve, 300 * attempt));
      }
    }
    o.logger.info({ families, policies: [...policies.keys()] }, 'network isolation rules installed');
    return isolation;
  }

  /** The upstream resolvers of Docker's embedded DNS, open on port 53 under every policy: a container's resolv.conf names them. */
  get resolvers(): readonly string[] {
    return this.#resolvers;
  }

  /**
   * Closes Docker's embedded DNS (127.0.0.11) in a started container's
   * network namespace: it answers the name, aliases and short id of every
   * container on the network, and the address of each, so on a network
   * shared by tasks it would confirm that another task's container exists.
   * The container asks the upstream resolvers itself instead (its own
   * resolv.conf; the rules open them already). Throws when the rule cannot
   * go in: the caller removes the container rather than run it open.
   */
  static async closeEmbeddedDns(pid: number): Promise<void> {
    if (!Number.isInteger(pid) || pid <= 0) throw new FailedPreconditionError('closing the embedded DNS: the container is not running');
    try {
      await run(
        'nsenter',
        // The xtables lock is the host's (only the network namespace is entered): wait for it as long as other rule changes take.
        ['--target', String(pid), '--net', '--', 'iptables', '-w', '30', '-I', 'OUTPUT', '-d', EMBEDDED_DNS, '-j', 'REJECT'],
        { timeout: 60_000 },
      );
    } catch (err) {
      throw new FailedPreconditionError(
        `docker.network: isolated could not close Docker's embedded DNS in a container (${(err as Error).message.trim().split('\n')[0]}); ` +
          'the executor needs nsenter (util-linux) and the host\'s PID namespace (/proc/<container pid>/ns/net)',
      );
    }
  }

  /** Id of the network of a tenant's containers (undefined: the operator's, e.g. warm pool containers). */
  policyIdOf(tenant: string | undefined): string {
    const override = tenant === undefined ? undefined : this.#o.tenants[tenant];
    return rulesId({ policy: tenantPolicy(this.#o.operator, override), resolvers: this.#resolvers });
  }

  /**
   * The Docker network for a tenant's containers, created on first use.
   * `renew`: the network vanished (another executor removed it while idle):
   * make it and its rules again.
   */
  networkFor(tenant: string | undefined, renew = false): Promise<string> {
    const id = this.policyIdOf(tenant);
    if (renew) this.#networks.delete(id);
    let ready = this.#networks.get(id);
    if (!ready) {
      ready = this.#ensureNetwork(id);
      const mine = ready;
      mine.catch(() => {
        if (this.#networks.get(id) === mine) this.#networks.delete(id);
      });
      this.#networks.set(id, ready);
    }
    return ready;
  }

  /** Whether every chain and jump is in place, for `berth doctor`. */
  async verify(): Promise<IsolationCheck[]> {
    const checks: IsolationCheck[] = [];
    const dockerUser = await succeeds(4, ['-C', 'FORWARD', '-j', 'DOCKER-USER']);
    checks.push({ ok: dockerUser, text: 'iptables: FORWARD -j DOCKER-USER (made by dockerd)' });
    for (const family of this.families) {
      const name = binary(family);
      for (const { chain, rule } of parentJumps(this.#forwardParent[family])) {
        const ok = await succeeds(family, ['-C', chain, ...rule]);
        checks.push({ ok, text: `${name}: ${chain} ${rule.join(' ')}` });
      }
      for (const id of this.#policies.keys()) {
        const ok = await succeeds(family, ['-C', CHAIN_FORWARD, ...forwardEntry(id)]);
        checks.push({ ok, text: `${name}: ${CHAIN_FORWARD} ${forwardEntry(id).join(' ')}` });
      }
    }
    return checks;
  }

  /**
   * Removes every Berth network Docker lets go (no container on it: this
   * executor's, and ones left by executors killed with -9) and its chain;
   * the shared chains go when no Berth network is left on the host. Then
   * every Berth network that exists (another executor's, perhaps made a
   * moment ago) gets its chain back from the policy in its label, so one
   * executor's shutdown never leaves another's containers unfiltered.
   */
  async close(): Promise<void> {
    const { docker, logger } = this.#o;
    const ids = new Set([...this.#policies.keys(), ...((await this.#berthNetworks())?.keys() ?? [])]);
    for (const id of ids) {
      try {
        await docker.getNetwork(networkName(id)).remove();
      } catch (err) {
        if (!isNotFound(err)) {
          logger.debug({ network: networkName(id), err: dockerMessage(err) }, 'network isolation: network in use; its rules stay');
          continue;
        }
      }
      for (const family of this.families) {
        await iptables(family, ['-D', CHAIN_FORWARD, ...forwardEntry(id)]).catch(() => undefined);
        await iptables(family, ['-F', networkChain(id)]).catch(() => undefined);
        await iptables(family, ['-X', networkChain(id)]).catch(() => undefined);
      }
    }
    const left = await this.#berthNetworks();
    if (left?.size === 0) await this.#removeShared();
    const now = left?.size === 0 ? await this.#berthNetworks() : left;
    if (now && now.size > 0) for (const family of this.families) await this.#installFamily(family, now);
  }

  /** Every Berth network on the host, by id, with the rules its label records; undefined when Docker does not answer. */
  async #berthNetworks(): Promise<Map<string, NetworkRules> | undefined> {
    const list = await this.#o.docker.listNetworks({ filters: { label: [`${NETWORK_LABEL}=1`] } }).catch(() => undefined);
    if (!list) return undefined;
    const found = new Map<string, NetworkRules>();
    for (const n of list) {
      const id = /^berth-isolated-([0-9a-f]{10})$/.exec(n.Name)?.[1];
      if (id) found.set(id, this.#policies.get(id) ?? rulesFromLabel(n.Labels?.[NETWORK_POLICY_LABEL]));
    }
    return found;
  }

  /** With no Berth network left: the jumps first (nothing enters any more), then every Berth chain. */
  async #removeShared(): Promise<void> {
    for (const family of this.families) {
      for (const { chain, rule } of parentJumps(this.#forwardParent[family])) {
        await iptables(family, ['-D', chain, ...rule]).catch(() => undefined);
      }
      const { stdout } = await run(binary(family), ['-w', '5', '-S']).catch(() => ({ stdout: '' }));
      const chains = [...stdout.matchAll(/^-N (BERTH-\S+)$/gm)].map((m) => m[1]!);
      for (const chain of [CHAIN_FORWARD, ...chains.filter((c) => c !== CHAIN_FORWARD)]) {
        await iptables(family, ['-F', chain]).catch(() => undefined);
      }
      for (const chain of chains) await iptables(family, ['-X', chain]).catch(() => undefined);
    }
  }

  async #installRules(): Promise<void> {
    for (const family of this.families) await this.#installFamily(family, this.#policies);
  }

  async #installFamily(family: IpFamily, networks: ReadonlyMap<string, NetworkRules>): Promise<void> {
    if (!(await succeeds(family, ['-S', CHAIN_FORWARD]))) {
      await restore(family, `*filter\n:${CHAIN_FORWARD} - [0:0]\n-A ${CHAIN_FORWARD} -j DROP\nCOMMIT\n`);
    }
    for (const [id, rules] of networks) await this.#installPolicy(family, id, rules);
    // BERTH-INPUT is shared: it opens port 53 on host addresses that any Berth network's resolvers name.
    const all = [...networks.values(), ...((await this.#berthNetworks())?.values() ?? [])];
    const local = hostAddresses();
    const localResolvers = [...new Set(all.flatMap((r) => r.resolvers).filter((r) => local.has(r)))];
    await restore(family, buildInputChainRestore(family, localResolvers));
    for (const { chain, rule } of parentJumps(this.#forwardParent[family])) {
      if (!(await succeeds(family, ['-C', chain, ...rule]))) await iptables(family, ['-I', chain, '1', ...rule]);
    }
  }

  async #installPolicy(family: IpFamily, id: string, rules: NetworkRules): Promise<void> {
    await restore(family, buildNetworkChainRestore(family, id, rules.policy, rules.resolvers));
    const entry = forwardEntry(id);
    if (!(await succeeds(family, ['-C', CHAIN_FORWARD, ...entry]))) {
      await iptables(family, ['-I', CHAIN_FORWARD, '1', ...entry]);
    }
  }

  /**
   * The network another executor made while this one's create failed with
   * `err`, or undefined when none did. On "same bridge name" the daemon has
   * the other network's bridge before its name can be looked up, so that
   * case waits for the name (bounded) instead of giving up at once.
   */
  async #raceWinner(name: string, err: unknown): Promise<Dockerode.NetworkInspectInfo | undefined> {
    const lookup = () =>
      this.#o.docker.getNetwork(name).inspect().then((i) => i as Dockerode.NetworkInspectInfo, () => undefined);
    const tries = /same bridge name/i.test(dockerMessage(err)) || isConflict(err) ? RACE_LOOKUPS : 1;
    for (let i = 0; i < tries; i++) {
      if (i > 0) await delay(RACE_LOOKUP_MS);
      const info = await lookup();
      if (info) return info;
    }
    return undefined;
  }

  async #ensureNetwork(id: string): Promise<string> {
    const { docker, daemon } = this.#o;
    const name = networkName(id);
    const rules = this.#policies.get(id)!;
    let info: Dockerode.NetworkInspectInfo | undefined;
    try {
      info = (await docker.getNetwork(name).inspect()) as Dockerode.NetworkInspectInfo;
    } catch (err) {
      if (!isNotFound(err)) throw dockerError(err, `inspecting network ${name}`, daemon);
    }
    if (!info) {
      try {
        await docker.createNetwork(networkCreateOptions(id, rules));
      } catch (err) {
        // Another executor on this daemon created it meanwhile: Docker answers 409, or (same bridge name) 403/500.
        info = await this.#raceWinner(name, err);
        if (!info) throw dockerError(err, `creating network ${name}`, daemon);
      }
      info ??= (await docker.getNetwork(name).inspect()) as Dockerode.NetworkInspectInfo;
    }
    const options = info.Options ?? {};
    if (options['com.docker.network.bridge.enable_icc'] !== 'false' || options['com.docker.network.bridge.name'] !== bridgeName(id)) {
      throw new FailedPreconditionError(
        `network ${name} exists but was not made by Berth (inter-container traffic on, or another bridge); remove it ` +
          `(docker network rm ${name}) and Berth makes its own`,
      );
    }
    // Rules match the bridge by name in this network namespace: a bridge not seen here gets none of them.
    if (!existsSync(`/sys/class/net/${bridgeName(id)}`)) {
      throw new FailedPreconditionError(
        `the bridge ${bridgeName(id)} of network ${name} is not visible to the executor, so its rules would not ` +
          'apply: run the executor on the Docker host, in the host network namespace, or set docker.network: bridge',
      );
    }
    // Another executor's close may have removed this policy's chain while the network was unused.
    for (const family of this.families) {
      if (!(await succeeds(family, ['-C', CHAIN_FORWARD, ...forwardEntry(id)]))) {
        await this.#installFamily(family, this.#policies);
      }
    }
    return name;
  }
}
