import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { ConfigError, hashApiKey } from '../../services/common/config.js';
import { loadConfig, parseConfig } from '../../services/common/config-load.js';

/** Runs `fn` with a config file holding `text`, in a directory removed afterwards. */
function withConfigFile(text: string, fn: (file: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'berth-config-'));
  try {
    const file = join(dir, 'config.yaml');
    writeFileSync(file, text);
    fn(file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

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

  test('security.redact_secrets: on by default, off from the file or HERMES_REDACT_SECRETS as upstream reads it', () => {
    assert.equal(loadConfig(undefined, {}).security.redact_secrets, true);
    assert.equal(parseConfig({ security: { redact_secrets: false } }).security.redact_secrets, false);
    withConfigFile('security:\n  redact_secrets: false\n', (file) => {
      assert.equal(loadConfig(file, {}).security.redact_secrets, false);
      assert.equal(loadConfig(file, { HERMES_REDACT_SECRETS: 'ON' }).security.redact_secrets, true);
    });
    assert.equal(loadConfig(undefined, { HERMES_REDACT_SECRETS: 'false' }).security.redact_secrets, false);
    // Upstream keeps redaction on only for 1/true/yes/on; any other value turns it off.
    assert.equal(loadConfig(undefined, { HERMES_REDACT_SECRETS: 'nope' }).security.redact_secrets, false);
    assert.throws(() => parseConfig({ security: { redact: false } }), /security/);
  });

  test('timezone: empty by default, an IANA name from the file or HERMES_TIMEZONE, anything else refused', () => {
    assert.equal(loadConfig(undefined, {}).timezone, '');
    assert.equal(parseConfig({ timezone: 'Europe/Berlin' }).timezone, 'Europe/Berlin');
    assert.equal(parseConfig({ timezone: 'UTC' }).timezone, 'UTC');
    withConfigFile('timezone: Asia/Tokyo\n', (file) => {
      assert.equal(loadConfig(file, {}).timezone, 'Asia/Tokyo');
      assert.equal(loadConfig(file, { HERMES_TIMEZONE: ' America/New_York ' }).timezone, 'America/New_York');
    });
    assert.throws(() => parseConfig({ timezone: 'Mars/Olympus_Mons' }), /must be an IANA time zone name[\s\S]*at timezone/);
    assert.throws(() => parseConfig({ timezone: '../etc/passwd' }), /timezone/);
    assert.throws(() => loadConfig(undefined, { HERMES_TIMEZONE: 'Not A Zone' }), /timezone/);
  });

  test('TERMINAL_* variables override the file, TERMINAL_ENV names the backend', () => {
    withConfigFile('terminal:\n  timeout: 60\n  backend: local\n', (file) => {
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
    });
  });

  test('code_execution.code_container: auto by default, set in the file or by BERTH_CODE_CONTAINER, nothing else', () => {
    assert.equal(loadConfig(undefined, {}).code_execution.code_container, 'auto');
    assert.equal(parseConfig({ code_execution: { code_container: 'off' } }).code_execution.code_container, 'off');
    assert.equal(loadConfig(undefined, { BERTH_CODE_CONTAINER: 'docker' }).code_execution.code_container, 'docker');
    assert.throws(() => loadConfig(undefined, { BERTH_CODE_CONTAINER: 'podman' }), /code_execution\.code_container/);
  });

  test('TERMINAL_DOCKER_EXTRA_ARGS: a JSON array keeps flags whose values hold commas; else split on commas', () => {
    const json = loadConfig(undefined, { TERMINAL_DOCKER_EXTRA_ARGS: '["--tmpfs=/cache:size=64m,exec", "--shm-size", "1g"]' });
    assert.deepEqual(json.terminal.docker_extra_args, ['--tmpfs=/cache:size=64m,exec', '--shm-size', '1g']);
    const plain = loadConfig(undefined, { TERMINAL_DOCKER_EXTRA_ARGS: '--shm-size=1g, --ulimit=nofile=1024' });
    assert.deepEqual(plain.terminal.docker_extra_args, ['--shm-size=1g', '--ulimit=nofile=1024']);
  });

  test('docker.disk_limit: auto by default; require and off are the other choices; container_disk in MiB', () => {
    const c = loadConfig(undefined, {});
    assert.equal(c.docker.disk_limit, 'auto');
    assert.equal(c.terminal.container_disk, 51200);
    assert.equal(parseConfig({ docker: { disk_limit: 'require' } }).docker.disk_limit, 'require');
    assert.equal(loadConfig(undefined, { TERMINAL_CONTAINER_DISK: '2048' }).terminal.container_disk, 2048);
    assert.throws(() => parseConfig({ docker: { disk_limit: 'strict' } }), /docker\.disk_limit/);
  });

  test('the modal backend needs terminal.modal_image, and says what kind', () => {
    assert.throws(() => parseConfig({ terminal: { backend: 'modal' } }), /terminal\.modal_image: the modal backend needs it \(a registry image with python3/);
    assert.equal(parseConfig({ terminal: { backend: 'modal', modal_image: 'python:3.12-slim' } }).terminal.modal_image, 'python:3.12-slim');
  });

  test('a bad config lists every problem at once', () => {
    // `VMware` is neither a built-in backend nor a package name (those are lower case): a bad terminal.backend.
    assert.throws(
      () => parseConfig({ terminal: { timeout: 0, backend: 'VMware', bogus: 1 }, server: { port: 70000 } }),
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
    withConfigFile('- a\n- b\n', (file) => {
      assert.throws(() => loadConfig(file, {}), /must hold a YAML mapping/);
      writeFileSync(file, 'terminal: [unclosed\n');
      assert.throws(() => loadConfig(file, {}), /not valid YAML/);
    });
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

  test('metrics: off by default, on loopback, 9464 for serve and dispatcher, 9465 for an executor', () => {
    assert.deepEqual(loadConfig(undefined, {}).metrics, {
      enabled: false,
      host: '127.0.0.1',
      port: 9464,
      executor_port: 9465,
      tenant_labels: false,
    });
    const fromFile = parseConfig({ metrics: { enabled: true, host: '0.0.0.0', port: 0, executor_port: 19465 } }).metrics;
    assert.deepEqual(fromFile, { enabled: true, host: '0.0.0.0', port: 0, executor_port: 19465, tenant_labels: false });
  });

  test('BERTH_METRICS_* variables override the file, "false" stays false', () => {
    withConfigFile('metrics:\n  enabled: true\n  port: 9000\n', (file) => {
      const c = loadConfig(file, {
        BERTH_METRICS_HOST: '::1',
        BERTH_METRICS_PORT: '9100',
        BERTH_METRICS_EXECUTOR_PORT: '9101',
      });
      assert.deepEqual(c.metrics, { enabled: true, host: '::1', port: 9100, executor_port: 9101, tenant_labels: false });
      assert.equal(loadConfig(file, { BERTH_METRICS_ENABLED: 'false' }).metrics.enabled, false);
      assert.equal(loadConfig(undefined, { BERTH_METRICS_ENABLED: 'true' }).metrics.enabled, true);
    });
  });

  test('bad metrics settings are listed by key', () => {
    assert.throws(
      () => parseConfig({ metrics: { enabled: 'maybe', port: 70000, executor_port: -1, path: '/m' } }),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        for (const needle of ['metrics.enabled', 'metrics.port', 'metrics.executor_port', 'path']) {
          assert.ok(err.message.includes(needle), `missing ${needle} in:\n${err.message}`);
        }
        return true;
      },
    );
    assert.throws(() => loadConfig(undefined, { BERTH_METRICS_PORT: 'ninety' }), /metrics\.port/);
  });

  test('BERTH_TENANTS replaces the tenants list; bad YAML or a non-list is refused by name', () => {
    const hash = hashApiKey('k1');
    withConfigFile(`terminal:\n  backend: docker\ntenants:\n  - { id: old, api_key_sha256: ${hash} }\n`, (file) => {
      const c = loadConfig(file, { BERTH_TENANTS: `- id: acme\n  api_key_sha256: ${hash}\n  allowed_backends: [docker]\n` });
      assert.deepEqual(c.tenants.map((t) => [t.id, t.allowed_backends]), [['acme', ['docker']]]);
      assert.deepEqual(loadConfig(file, { BERTH_TENANTS: '[]' }).tenants, []);
      assert.throws(() => loadConfig(file, { BERTH_TENANTS: '- id: [' }), /BERTH_TENANTS is not valid YAML/);
      assert.throws(() => loadConfig(file, { BERTH_TENANTS: 'id: acme' }), /BERTH_TENANTS must hold a YAML list/);
      assert.throws(() => loadConfig(file, { BERTH_TENANTS: '- id: acme\n  api_key_sha256: short\n' }), /api_key_sha256/);
    });
  });
});

describe('deploy/config.example.yaml', () => {
  const example = join(fileURLToPath(new URL('../../..', import.meta.url)), 'deploy', 'config.example.yaml');

  test('loads as it stands and names every key a config can set (lists and maps whole)', () => {
    const loaded = loadConfig(example);
    const raw = parseYaml(readFileSync(example, 'utf8')) as Record<string, unknown>;
    const missing: string[] = [];
    const walk = (defaults: Record<string, unknown>, written: unknown, at: string) => {
      for (const [key, value] of Object.entries(defaults)) {
        const here = written !== null && typeof written === 'object' && key in written ? (written as Record<string, unknown>)[key] : undefined;
        if (here === undefined) missing.push(`${at}${key}`);
        else if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length > 0) {
          walk(value as Record<string, unknown>, here, `${at}${key}.`);
        }
      }
    };
    walk(parseConfig({}) as unknown as Record<string, unknown>, raw, '');
    assert.deepEqual(missing, []);
    assert.deepEqual(loaded, parseConfig(raw));
  });
});
