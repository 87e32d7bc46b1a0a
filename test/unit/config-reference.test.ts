/**
 * docs/configuration.md's reference is generated from the config schema and
 * the environment table; this keeps the committed page equal to what they
 * render, so a key cannot be added, renamed or given a new default without
 * the page saying so.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { REFERENCE_BEGIN, REFERENCE_END, referenceRows, renderConfigReference, spliceReference } from '../../services/common/config-reference.js';
import { ENV_VARIABLES, applyEnvOverrides } from '../../services/common/config-env.js';
import { configSchema } from '../../services/common/config.js';
import { readDoc } from '../support/markdown-docs.js';

describe('configuration reference', () => {
  test('docs/configuration.md holds exactly what the schema renders (run make config-doc after changing a key)', () => {
    const page = readDoc('docs/configuration.md');
    assert.equal(spliceReference(page, renderConfigReference()), page, 'docs/configuration.md is stale: run make config-doc and commit it');
  });

  test('every key of the schema is in the reference, with its type and default', () => {
    const rows = new Map(referenceRows().map((r) => [r.key, r]));
    const walk = (shape: Record<string, z.ZodType>, prefix: string): string[] => Object.keys(shape).map((k) => `${prefix}${k}`);
    for (const key of walk(configSchema.shape as unknown as Record<string, z.ZodType>, '')) assert.ok(rows.has(key), key);
    assert.deepEqual(rows.get('terminal.timeout'), {
      key: 'terminal.timeout',
      type: 'integer, ≥ 1',
      default: '`180`',
      description: 'Seconds a foreground `terminal` command may run when the call names no timeout.',
    });
    assert.equal(rows.get('docker.network')?.type, '`none` \\| `isolated` \\| `bridge`');
    assert.equal(rows.get('server.tls.cert_file')?.default, 'required');
    assert.equal(rows.get('quotas.max_tasks')?.default, 'unset');
    assert.equal(rows.get('terminal.env_passthrough')?.type, 'list of strings (comma-separated in a variable)');
    assert.ok(rows.has('tenants[].network.egress_allow'));
  });

  test('a key without a description stops the generator, naming the key', () => {
    const schema = z.object({ documented: z.string().default('').describe('says what it is'), bare: z.number().default(1) });
    assert.throws(() => referenceRows(schema), /config key bare has no description/);
  });

  test('every environment variable sets a key the reference lists, and works as the table says', () => {
    const keys = new Set(referenceRows().map((r) => r.key));
    for (const v of ENV_VARIABLES) assert.ok(keys.has(v.key), `${v.name} sets ${v.key}, which is not a config key`);
    const raw = applyEnvOverrides({}, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/', HERMES_REDACT_SECRETS: 'no', TERMINAL_DOCKER_ENV: '{"A":"1"}' });
    assert.deepEqual(raw, { tracing: { endpoint: 'http://collector:4318/v1/traces' }, security: { redact_secrets: false }, terminal: { docker_env: { A: '1' } } });
  });

  test('the page without markers is refused rather than rewritten whole', () => {
    assert.throws(() => spliceReference('# no markers here\n', 'x'), /markers/);
    assert.equal(spliceReference(`a\n${REFERENCE_BEGIN}\nold\n${REFERENCE_END}\nb`, 'new'), 'a\nnew\nb');
  });
});
