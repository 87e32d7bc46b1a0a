import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, hashApiKey, loadConfig, parseConfig } from '../../services/common/config.js';

describe('config', () => {
  test('defaults need no file: local backend on 127.0.0.1:7700, spec terminal defaults', () => {
    const c = loadConfig(undefined, {});
    assert.equal(c.server.host, '127.0.0.1');
    assert.equal(c.server.port, 7700);
    assert.equal(c.terminal.backend, 'local');
    assert.equal(c.terminal.timeout, 180);
    assert.equal(c.terminal.lifetime_seconds, 300);
    assert.equal(c.terminal.max_foreground_timeout, 600);
    assert.equal(c.terminal.ssh_port, 22);
    assert.equal(c.terminal.container_memory, 5120);
    assert.equal(c.terminal.container_persistent, true);
  });

  test('TERMINAL_* variables override the file, TERMINAL_ENV names the backend', () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-config-'));
    try {
      const file = join(dir, 'config.yaml');
      writeFileSync(file, 'terminal:\n  timeout: 60\n  backend: local\n');
      const c = loadConfig(file, {
        TERMINAL_TIMEOUT: '90',
        TERMINAL_ENV: 'docker',
        TERMINAL_CONTAINER_PERSISTENT: 'false',
        TERMINAL_ENV_PASSTHROUGH: 'FOO, BAR',
        TERMINAL_DOCKER_ENV: '{"A":"1"}',
        TERMINAL_MAX_FOREGROUND_TIMEOUT: '120',
      });
      assert.equal(c.terminal.timeout, 90);
      assert.equal(c.terminal.backend, 'docker');
      assert.equal(c.terminal.container_persistent, false, '"false" must not become true');
      assert.deepEqual(c.terminal.env_passthrough, ['FOO', 'BAR']);
      assert.deepEqual(c.terminal.docker_env, { A: '1' });
      assert.equal(c.terminal.max_foreground_timeout, 120);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('code_execution.code_container: auto by default, set in the file or by BERTH_CODE_CONTAINER, nothing else', () => {
    assert.equal(loadConfig(undefined, {}).code_execution.code_container, 'auto');
    assert.equal(parseConfig({ code_execution: { code_container: 'off' } }).code_execution.code_container, 'off');
    assert.equal(loadConfig(undefined, { BERTH_CODE_CONTAINER: 'docker' }).code_execution.code_container, 'docker');
    assert.throws(() => loadConfig(undefined, { BERTH_CODE_CONTAINER: 'podman' }), /code_execution\.code_container/);
  });

  test('a bad config lists every problem at once', () => {
    assert.throws(
      () => parseConfig({ terminal: { timeout: 0, backend: 'vmware', bogus: 1 }, server: { port: 70000 } }),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        for (const needle of ['terminal.timeout', 'terminal.backend', 'bogus', 'server.port']) {
          assert.ok(err.message.includes(needle), `missing ${needle} in:\n${err.message}`);
        }
        return true;
      },
    );
  });

  test('unreadable and non-mapping files are reported with the path', () => {
    assert.throws(() => loadConfig('/nonexistent/berth.yaml', {}), /cannot read config file \/nonexistent\/berth.yaml/);
    const dir = mkdtempSync(join(tmpdir(), 'berth-config-'));
    try {
      const file = join(dir, 'c.yaml');
      writeFileSync(file, '- a\n- b\n');
      assert.throws(() => loadConfig(file, {}), /must hold a YAML mapping/);
      writeFileSync(file, 'terminal: [unclosed\n');
      assert.throws(() => loadConfig(file, {}), /not valid YAML/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('tenants with the local backend are refused unless explicitly allowed', () => {
    const tenants = [{ id: 'acme', api_key_sha256: hashApiKey('k1') }];
    assert.throws(() => parseConfig({ tenants }), /local runs commands on the host with no isolation/);
    const ok = parseConfig({ tenants, allow_local_multi_tenant: true });
    assert.equal(ok.tenants.length, 1);
  });

  test('duplicate tenant ids are refused', () => {
    const t = { id: 'a', api_key_sha256: hashApiKey('x') };
    assert.throws(() => parseConfig({ tenants: [t, t], allow_local_multi_tenant: true }), /duplicate id 'a'/);
  });
});
