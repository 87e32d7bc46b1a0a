/**
 * The pure parts of docker.network: isolated: CIDR arithmetic, the
 * config's narrowing rule, and the exact iptables-restore text per policy.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cidrContains, parseCidr } from '../../services/common/cidr.js';
import { ConfigError } from '../../services/common/config.js';
import { loadConfig, parseConfig } from '../../services/common/config-load.js';
import { dockerOptionsFromConfig } from '../../services/executor/backends/docker/docker-options.js';
import { silentLogger } from '../../services/common/logging.js';
import {
  bridgeName,
  buildInputChainRestore,
  buildNetworkChainRestore,
  embeddedDnsUpstreams,
  forwardEntry,
  networkCreateOptions,
  networkName,
  parentJumps,
  rulesFromLabel,
  rulesId,
  tenantPolicy,
} from '../../services/executor/backends/docker/network-policy.js';

const KEY = 'a'.repeat(64);
/** Tenants need a container backend. */
const parse = (raw: Record<string, unknown>) => parseConfig({ terminal: { backend: 'docker' }, ...raw });

describe('cidr', () => {
  it('parses and normalises IPv4 and IPv6 ranges, and refuses what is not one', () => {
    assert.equal(parseCidr('10.1.2.3/8')?.text, '10.0.0.0/8');
    assert.equal(parseCidr('192.0.2.7')?.text, '192.0.2.7/32');
    assert.equal(parseCidr('fd00:1::5/16')?.text, 'fd00::/16');
    assert.equal(parseCidr('::ffff:10.0.0.1/128')?.text, '::ffff:a00:1/128');
    for (const bad of ['10.0.0.0/33', 'fe80::/129', 'example.com', '10.0.0/8', '10.0.0.0/8/1', '', '10.0.0.0/x']) {
      assert.equal(parseCidr(bad), undefined, bad);
    }
  });

  it('tells whether one range lies inside another', () => {
    const c = (s: string) => parseCidr(s)!;
    assert.ok(cidrContains(c('10.0.0.0/8'), c('10.20.0.0/16')));
    assert.ok(cidrContains(c('10.20.0.0/16'), c('10.20.0.0/16')));
    assert.ok(!cidrContains(c('10.20.0.0/16'), c('10.0.0.0/8')));
    assert.ok(!cidrContains(c('10.20.0.0/16'), c('10.21.0.1/32')));
    assert.ok(cidrContains(c('fd00::/8'), c('fd12:3456::/32')));
    assert.ok(!cidrContains(c('fd00::/8'), c('10.0.0.0/8')));
  });
});

describe('network config', () => {
  it('defaults to isolated, public-only egress, no allowlist, 256 pids', () => {
    const c = loadConfig(undefined, {});
    assert.deepEqual([c.docker.network, c.docker.egress, c.docker.egress_allow, c.terminal.container_pids], ['isolated', 'public-only', [], 256]);
    assert.equal(loadConfig(undefined, { TERMINAL_CONTAINER_PIDS: '512' }).terminal.container_pids, 512);
    assert.equal(loadConfig(undefined, { BERTH_DOCKER_NETWORK: 'bridge' }).docker.network, 'bridge');
    assert.throws(() => loadConfig(undefined, { BERTH_DOCKER_NETWORK: 'host' }), /docker\.network/);
  });

  it('refuses a CIDR that is not one, naming the key', () => {
    assert.throws(
      () => parseConfig({ docker: { egress_allow: ['10.0.0.0/8', 'mirror.internal'] } }),
      (e: unknown) => e instanceof ConfigError && /docker\.egress_allow\[1\]/.test(e.message) && /not a CIDR/.test(e.message),
    );
  });

  it('lets a tenant narrow the operator policy, and rejects every widening by its key', () => {
    const ok = parse({
      docker: { egress: 'public-only', egress_allow: ['10.20.0.0/16'] },
      tenants: [
        { id: 'a', api_key_sha256: KEY, network: { egress: 'none' } },
        { id: 'b', api_key_sha256: KEY.replace('a', 'b'), network: { egress_allow: ['10.20.30.0/24'] } },
      ],
    });
    assert.equal(ok.tenants.length, 2);
    assert.throws(
      () =>
        parse({
          docker: { egress: 'public-only', egress_allow: ['10.20.0.0/16'] },
          tenants: [
            { id: 'wide', api_key_sha256: KEY, network: { egress: 'open', egress_allow: ['10.0.0.0/8', '10.20.1.0/24'] } },
          ],
        }),
      (e: unknown) =>
        e instanceof ConfigError &&
        /tenants\[wide\]\.network\.egress: open is wider than docker\.egress \(public-only\)/.test(e.message) &&
        /tenants\[wide\]\.network\.egress_allow: 10\.0\.0\.0\/8 is not inside docker\.egress_allow/.test(e.message) &&
        !/10\.20\.1\.0\/24/.test(e.message),
    );
    assert.throws(
      () => parse({ docker: { network: 'bridge' }, tenants: [{ id: 'x', api_key_sha256: KEY, network: { egress: 'none' } }] }),
      (e: unknown) => e instanceof ConfigError && /tenants\[x\]\.network: needs docker\.network: isolated/.test(e.message),
    );
    // Under open, private ranges are the operator's already; link-local is not.
    parse({ docker: { egress: 'open' }, tenants: [{ id: 'o', api_key_sha256: KEY, network: { egress_allow: ['10.0.0.0/8'] } }] });
    assert.throws(
      () => parse({ docker: { egress: 'open' }, tenants: [{ id: 'o', api_key_sha256: KEY, network: { egress_allow: ['169.254.169.254/32'] } }] }),
      /tenants\[o\]\.network\.egress_allow: 169\.254\.169\.254\/32/,
    );
  });

  it("hands the executor's docker backend the policy, each tenant's override and the pids limit", () => {
    const config = parseConfig({
      terminal: { backend: 'docker', container_pids: 100 },
      docker: { egress_allow: ['10.20.0.0/16'] },
      tenants: [{ id: 'a', api_key_sha256: KEY, network: { egress: 'none' } }, { id: 'b', api_key_sha256: KEY.replace('a', 'b') }],
    });
    const o = dockerOptionsFromConfig(config, silentLogger());
    assert.deepEqual([o.network, o.egress, o.egressAllow, o.tenantNetworks, o.pidsLimit], [
      'isolated', 'public-only', ['10.20.0.0/16'], { a: { egress: 'none' } }, 100,
    ]);
  });
});

describe('network policy rules', () => {
  const operator = { egress: 'public-only', egressAllow: ['10.20.0.0/16', 'fd00:1::/32'] } as const;

  it('a tenant inherits what it does not override; equal rules share one id, other resolvers get their own', () => {
    assert.deepEqual(tenantPolicy(operator, { egress: 'none' }), { egress: 'none', egressAllow: operator.egressAllow });
    assert.deepEqual(tenantPolicy(operator, { egress_allow: [] }), { egress: 'public-only', egressAllow: [] });
    const id = rulesId({ policy: operator, resolvers: ['10.0.0.2'] });
    assert.equal(id, rulesId({ policy: { egress: 'public-only', egressAllow: ['fd00:1::/32', '10.20.1.1/16'] }, resolvers: ['10.0.0.2/32'] }));
    assert.notEqual(id, rulesId({ policy: { ...operator, egress: 'none' }, resolvers: ['10.0.0.2'] }));
    assert.notEqual(id, rulesId({ policy: operator, resolvers: ['10.0.0.3'] }));
    assert.match(id, /^[0-9a-f]{10}$/);
    assert.ok(bridgeName(id).length <= 15, 'Linux limits interface names to 15 characters');
  });

  it("reads a network's rules back from its label, and a label that does not parse as the narrowest", () => {
    const rules = { policy: operator, resolvers: ['10.0.0.2'] };
    assert.deepEqual(rulesFromLabel(networkCreateOptions('x', rules).Labels?.['berth.network.policy']), rules);
    for (const bad of [undefined, '', '{', '{"egress":"wide"}', '[]']) {
      assert.deepEqual(rulesFromLabel(bad), { policy: { egress: 'none', egressAllow: [] }, resolvers: [] }, String(bad));
    }
    assert.deepEqual(rulesFromLabel('{"egress":"open","egressAllow":["10.0.0.0/8","nope",3]}'), {
      policy: { egress: 'open', egressAllow: ['10.0.0.0/8'] },
      resolvers: [],
    });
  });

  it('makes a bridge network with inter-container traffic off and its own bridge name', () => {
    const o = networkCreateOptions('0123456789', { policy: operator, resolvers: [] });
    assert.equal(o.Name, networkName('0123456789'));
    assert.deepEqual(o.Options, {
      'com.docker.network.bridge.name': 'berth0123456789',
      'com.docker.network.bridge.enable_icc': 'false',
      'com.docker.network.bridge.enable_ip_masquerade': 'true',
    });
    assert.equal(o.Internal, false);
  });

  it('public-only (IPv4): containers apart, DNS upstream on 53 only, allowlist, non-public ranges dropped, the rest returns', () => {
    assert.equal(
      buildNetworkChainRestore(4, 'abc', operator, ['10.255.255.53', '2001:db8::53']),
      [
        '*filter',
        ':BERTH-NET-abc - [0:0]',
        '-A BERTH-NET-abc -o berthabc -j DROP',
        '-A BERTH-NET-abc -m conntrack --ctstate DNAT -j DROP',
        '-A BERTH-NET-abc -d 10.255.255.53/32 -p udp -m udp --dport 53 -j RETURN',
        '-A BERTH-NET-abc -d 10.255.255.53/32 -p tcp -m tcp --dport 53 -j RETURN',
        '-A BERTH-NET-abc -d 10.20.0.0/16 -j RETURN',
        '-A BERTH-NET-abc -d 0.0.0.0/8 -j DROP',
        '-A BERTH-NET-abc -d 10.0.0.0/8 -j DROP',
        '-A BERTH-NET-abc -d 100.64.0.0/10 -j DROP',
        '-A BERTH-NET-abc -d 127.0.0.0/8 -j DROP',
        '-A BERTH-NET-abc -d 169.254.0.0/16 -j DROP',
        '-A BERTH-NET-abc -d 172.16.0.0/12 -j DROP',
        '-A BERTH-NET-abc -d 192.168.0.0/16 -j DROP',
        '-A BERTH-NET-abc -d 224.0.0.0/4 -j DROP',
        '-A BERTH-NET-abc -d 240.0.0.0/4 -j DROP',
        '-A BERTH-NET-abc -j RETURN',
        'COMMIT',
        '',
      ].join('\n'),
    );
  });

  it('IPv6 gets its own family of ranges; none drops everything but DNS and the allowlist; open keeps link-local closed', () => {
    const v6 = buildNetworkChainRestore(6, 'abc', operator, ['10.255.255.53', '2001:db8::53']);
    assert.match(v6, /^-A BERTH-NET-abc -d 2001:db8::53\/128 -p udp -m udp --dport 53 -j RETURN$/m);
    assert.match(v6, /^-A BERTH-NET-abc -d fd00:1::\/32 -j RETURN$/m);
    for (const r of ['fc00::/7', 'fe80::/10', 'ff00::/8', '::1/128']) assert.ok(v6.includes(`-d ${r} -j DROP`), r);
    assert.doesNotMatch(v6, /10\.255|10\.20/);
    const none = buildNetworkChainRestore(4, 'n', { egress: 'none', egressAllow: ['10.20.0.0/16'] }, ['8.8.8.8']);
    assert.deepEqual(none.split('\n').slice(-5), ['-A BERTH-NET-n -d 8.8.8.8/32 -p tcp -m tcp --dport 53 -j RETURN', '-A BERTH-NET-n -d 10.20.0.0/16 -j RETURN', '-A BERTH-NET-n -j DROP', 'COMMIT', ''].slice(-5));
    const open = buildNetworkChainRestore(4, 'o', { egress: 'open', egressAllow: [] }, []);
    assert.deepEqual(open.split('\n').slice(2, -2), [
      '-A BERTH-NET-o -o bertho -j DROP',
      '-A BERTH-NET-o -m conntrack --ctstate DNAT -j DROP',
      '-A BERTH-NET-o -d 169.254.0.0/16 -j DROP',
      '-A BERTH-NET-o -j RETURN',
    ]);
  });

  it('nothing from a Berth bridge reaches the host but replies, DNS on the host and (IPv6) neighbour discovery', () => {
    assert.equal(
      buildInputChainRestore(4, ['192.0.2.2']),
      [
        '*filter',
        ':BERTH-INPUT - [0:0]',
        '-A BERTH-INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN',
        '-A BERTH-INPUT -d 192.0.2.2/32 -p udp -m udp --dport 53 -j RETURN',
        '-A BERTH-INPUT -d 192.0.2.2/32 -p tcp -m tcp --dport 53 -j RETURN',
        '-A BERTH-INPUT -j DROP',
        'COMMIT',
        '',
      ].join('\n'),
    );
    const v6 = buildInputChainRestore(6, ['192.0.2.2']);
    assert.match(v6, /--icmpv6-type neighbour-solicitation -j RETURN\n.*--icmpv6-type neighbour-advertisement -j RETURN\n-A BERTH-INPUT -j DROP/);
    assert.doesNotMatch(v6, /192\.0\.2\.2/);
  });

  it('jumps: every Berth bridge into BERTH-FORWARD and BERTH-INPUT, each bridge by goto into its policy chain', () => {
    assert.deepEqual(parentJumps('DOCKER-USER'), [
      { chain: 'DOCKER-USER', rule: ['-i', 'berth+', '-j', 'BERTH-FORWARD'] },
      { chain: 'INPUT', rule: ['-i', 'berth+', '-j', 'BERTH-INPUT'] },
    ]);
    assert.deepEqual(forwardEntry('abc'), ['-i', 'berthabc', '-g', 'BERTH-NET-abc']);
  });

  it("finds the embedded resolver's upstreams as dockerd does: loopback dropped, Google's when none is left", () => {
    assert.deepEqual(embeddedDnsUpstreams('# x\nnameserver 10.255.255.53\nnameserver 127.0.0.53\nsearch lan\n', ['192.0.2.53']), [
      '192.0.2.53',
      '10.255.255.53',
    ]);
    assert.deepEqual(embeddedDnsUpstreams('nameserver 127.0.0.53\nnameserver ::1\n', []), [
      '8.8.8.8',
      '8.8.4.4',
      '2001:4860:4860::8888',
      '2001:4860:4860::8844',
    ]);
    assert.deepEqual(embeddedDnsUpstreams('nameserver fe80::1%eth0\n', []), ['fe80::1']);
  });
});
