import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { ConfigError } from '../../services/common/config.js';
import { parseConfig } from '../../services/common/config-load.js';
import { silentLogger } from '../../services/common/logging.js';
import {
  createSshBackend,
  defaultKnownHostsPath,
  expandHome,
  sshBackendOptionsFromConfig,
} from '../../services/executor/backends/ssh/create-ssh-backend.js';

describe('ssh backend config', () => {
  it('lists every missing ssh key at start', () => {
    assert.throws(
      () => parseConfig({ terminal: { backend: 'ssh', ssh_host: 'h' } }),
      (err: unknown) =>
        err instanceof ConfigError &&
        /terminal\.ssh_user: the ssh backend needs it/.test(err.message) &&
        /terminal\.ssh_key: the ssh backend needs it/.test(err.message) &&
        !/ssh_host/.test(err.message),
    );
  });

  it('maps terminal.ssh_* to backend options with the spec defaults', () => {
    const config = parseConfig({ terminal: { backend: 'ssh', ssh_host: 'h', ssh_user: 'u', ssh_key: '~/.ssh/id' } });
    const options = sshBackendOptionsFromConfig(config, Buffer.from('KEY'));
    assert.equal(options.host, 'h');
    assert.equal(options.port, 22);
    assert.equal(options.user, 'u');
    assert.equal(options.hostKeyPolicy, 'accept-new');
    assert.equal(options.connectTimeoutMs, 10_000);
    assert.equal(options.keyName, '~/.ssh/id');
    assert.equal(options.knownHostsPath, defaultKnownHostsPath(''));
    const pinned = parseConfig({
      terminal: { backend: 'ssh', ssh_host: 'h', ssh_user: 'u', ssh_key: 'k', ssh_known_hosts: '/etc/berth/known_hosts', ssh_host_key_policy: 'strict', ssh_connect_timeout: 3, ssh_port: 2222 },
      executor: { state_root: '/var/lib/berth' },
    });
    const strict = sshBackendOptionsFromConfig(pinned, Buffer.from('KEY'));
    assert.deepEqual([strict.knownHostsPath, strict.hostKeyPolicy, strict.connectTimeoutMs, strict.port], ['/etc/berth/known_hosts', 'strict', 3000, 2222]);
    assert.equal(defaultKnownHostsPath('/var/lib/berth'), '/var/lib/berth/ssh/known_hosts');
  });

  it('expands ~ in paths', () => {
    assert.equal(expandHome('~/.ssh/id', '/home/x'), '/home/x/.ssh/id');
    assert.equal(expandHome('/abs', '/home/x'), '/abs');
    assert.equal(expandHome('~', '/home/x'), '/home/x');
  });

  it('fails at start when the key cannot be read', async () => {
    const config = parseConfig({
      terminal: { backend: 'ssh', ssh_host: 'h', ssh_user: 'u', ssh_key: path.join(os.tmpdir(), 'berth-no-such-key') },
    });
    await assert.rejects(createSshBackend(config, silentLogger()), /cannot read terminal\.ssh_key .*berth-no-such-key/);
  });
});
