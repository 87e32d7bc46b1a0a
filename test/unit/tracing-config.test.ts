/**
 * How the standard OTEL_* variables become `tracing.*` settings, what a bad
 * value says, and the pure helpers of tool-call spans.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../../services/common/config.js';
import { loadConfig } from '../../services/common/config-load.js';
import { parseResourceAttributes } from '../../services/common/tracing/otel-tracing.js';
import { resultExitCode } from '../../services/dispatcher/tool-call-tracing.js';

describe('tracing config from OTEL_* variables', () => {
  test('off by default, even with an endpoint set', () => {
    const c = loadConfig(undefined, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' });
    assert.equal(c.tracing.exporter, 'none');
    assert.equal(c.tracing.sampler, 'parentbased_always_on');
    assert.equal(c.tracing.task_ids, false);
  });

  test('the general endpoint gets /v1/traces appended; the traces endpoint is used as is and wins', () => {
    const base = loadConfig(undefined, { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' });
    assert.equal(base.tracing.exporter, 'otlp');
    assert.equal(base.tracing.endpoint, 'http://collector:4318/v1/traces');
    const both = loadConfig(undefined, {
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example.test/custom',
    });
    assert.equal(both.tracing.endpoint, 'https://traces.example.test/custom');
  });

  test('service name, sampler, ratio, resource attributes and task ids', () => {
    const c = loadConfig(undefined, {
      OTEL_TRACES_EXPORTER: 'OTLP',
      OTEL_SERVICE_NAME: 'agents-prod',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.25',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod',
      BERTH_TRACING_TASK_IDS: 'true',
    });
    assert.equal(c.tracing.exporter, 'otlp');
    assert.equal(c.tracing.service_name, 'agents-prod');
    assert.equal(c.tracing.sampler, 'parentbased_traceidratio');
    assert.equal(c.tracing.sampler_arg, 0.25);
    assert.equal(c.tracing.resource_attributes, 'deployment.environment=prod');
    assert.equal(c.tracing.task_ids, true);
  });

  test('OTEL_SDK_DISABLED=true turns tracing off whatever else is set', () => {
    const c = loadConfig(undefined, { OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' });
    assert.equal(c.tracing.exporter, 'none');
  });

  test('unsupported exporters, protocols and samplers fail at start, naming the variable', () => {
    assert.throws(() => loadConfig(undefined, { OTEL_TRACES_EXPORTER: 'zipkin' }), (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /OTEL_TRACES_EXPORTER \(tracing\.exporter\): otlp or none/);
      return true;
    });
    assert.throws(
      () => loadConfig(undefined, { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }),
      /OTEL_EXPORTER_OTLP_PROTOCOL \(tracing\.protocol\): only http\/protobuf is built in/,
    );
    assert.throws(() => loadConfig(undefined, { OTEL_TRACES_SAMPLER: 'sometimes' }), /OTEL_TRACES_SAMPLER \(tracing\.sampler\): one of/);
    assert.throws(() => loadConfig(undefined, { OTEL_TRACES_SAMPLER_ARG: '2' }), /sampler_arg/);
    assert.throws(() => loadConfig(undefined, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'collector:4318' }), /tracing\.endpoint: an http\(s\) URL/);
  });

  test('the signal-specific protocol variable wins over the general one', () => {
    assert.throws(
      () => loadConfig(undefined, { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' }),
      /only http\/protobuf/,
    );
    const c = loadConfig(undefined, { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf' });
    assert.equal(c.tracing.protocol, 'http/protobuf');
  });
});

describe('tracing helpers', () => {
  test('OTEL_RESOURCE_ATTRIBUTES pairs are split and percent-decoded; malformed pairs are skipped', () => {
    assert.deepEqual(parseResourceAttributes('service.namespace=agents, team=a%2Cb,broken,=x'), {
      'service.namespace': 'agents',
      team: 'a,b',
    });
  });

  test("a result's exit_code is found without parsing, and not inside a string value", () => {
    assert.equal(resultExitCode('{"output": "hi", "exit_code": 3, "error": null}'), 3);
    assert.equal(resultExitCode('{"output":"","exit_code":-1}'), -1);
    assert.equal(resultExitCode('{"output": "{\\"exit_code\\": 7}", "exit_code": 0}'), 0);
    assert.equal(resultExitCode('{"output": "{\\"exit_code\\": 7}"}'), undefined);
    assert.equal(resultExitCode('{"content": "x"}'), undefined);
  });
});
