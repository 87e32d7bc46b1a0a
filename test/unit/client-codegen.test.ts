/**
 * The pure parts of the client and `berth mcp`: the tool-method generator
 * (and that the committed output matches the registry), backoff bounds, PEM
 * sources, result error detection and --listen parsing.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { argsTypeName, generateToolModule, methodName, schemaToType } from '../../services/client/codegen/schema-to-ts.js';
import { backoffDelayMs } from '../../services/client/retry.js';
import { readPem } from '../../services/client/credentials.js';
import { isErrorResult, mcpTool } from '../../services/cli/mcp-bridge.js';
import { parseListen } from '../../services/cli/mcp-command.js';
import { REPO_ROOT } from '../support/serve-process.js';

test('tool names become camelCase methods and PascalCase argument types', () => {
  assert.equal(methodName('read_file'), 'readFile');
  assert.equal(methodName('terminal'), 'terminal');
  assert.equal(methodName('mcp-github.create_issue'), 'mcpGithubCreateIssue');
  assert.equal(argsTypeName('execute_code'), 'ExecuteCodeArgs');
});

test('schemas become TypeScript types: required, enums, arrays, nullable, nested objects', () => {
  const type = schemaToType({
    type: 'object',
    properties: {
      command: { type: 'string', description: 'what to run */ not a comment end' },
      timeout: { type: 'integer', default: 180 },
      mode: { type: 'string', enum: ['a', 'b'] },
      tags: { type: 'array', items: { type: 'string' } },
      limit: { type: ['integer', 'null'] },
      'odd-key': { type: 'object', properties: { x: { type: 'boolean' } }, required: ['x'] },
    },
    required: ['command'],
  });
  assert.match(type, /\n {2}command: string;/);
  assert.match(type, /\n {2}timeout\?: number;/);
  assert.match(type, /@defaultValue 180/);
  assert.match(type, /mode\?: "a" \| "b";/);
  assert.match(type, /tags\?: string\[\];/);
  assert.match(type, /limit\?: number \| null;/);
  assert.match(type, /"odd-key"\?: \{\n {4}x: boolean;\n {2}\};/);
  assert.ok(!type.includes('*/ not'), 'a description cannot end the doc comment');
  assert.equal(schemaToType({ type: 'object' }), 'Record<string, unknown>');
  assert.equal(schemaToType(undefined), 'unknown');
});

test('the generated module has one method per tool, and the committed copy is current', async () => {
  const text = generateToolModule(
    [{ name: 'say_hi', description: 'Says hi.', parameters: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] } }],
    'test',
  );
  assert.match(text, /export interface SayHiArgs \{\n {2}to: string;\n\}/);
  assert.match(text, /sayHi\(args: SayHiArgs, options\?: ToolCallOptions\): Promise<ToolResultOf<"say_hi">> \{\n {4}return this\.call\("say_hi"/);
  // An argument the tool still takes but no longer advertises stays typed, marked deprecated.
  const legacy = generateToolModule(
    [
      {
        name: 'say_hi',
        description: 'Says hi.',
        parameters: { type: 'object', properties: { to: { type: 'string' } } },
        legacyParameters: { whom: { type: 'string', description: 'Use to.' } },
      },
    ],
    'test',
  );
  assert.match(legacy, /export interface SayHiArgs \{\n {2}to\?: string;\n {2}\/\*\*\n {3}\* @deprecated Use to\.\n {3}\*\/\n {2}whom\?: string;\n\}/);

  // What CI's client-check guards, run here too: the registry's schemas and the committed file agree.
  const { builtinToolSpecs } = await import('../../services/client/codegen/builtin-tool-specs.js');
  const fresh = generateToolModule(builtinToolSpecs(), 'services/client/codegen/generate-tools.ts');
  const committed = readFileSync(join(REPO_ROOT, 'services/client/generated/tools.ts'), 'utf8');
  assert.equal(committed, fresh, "services/client/generated/tools.ts is stale: run 'make client-gen'");
  assert.match(committed, /\n {2}terminal\(args: TerminalArgs/);
});

test('backoff grows exponentially to its cap, with full jitter', () => {
  const options = { initialBackoffMs: 100, maxBackoffMs: 1000 };
  assert.equal(backoffDelayMs(1, options, () => 1), 100);
  assert.equal(backoffDelayMs(3, options, () => 1), 400);
  assert.equal(backoffDelayMs(10, options, () => 1), 1000);
  assert.equal(backoffDelayMs(10, options, () => 0), 0);
});

test('PEM sources: text as is, bytes as is, anything else a path, with a clear error', () => {
  const pem = '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n';
  assert.equal(readPem(pem, 'ca').toString(), pem);
  assert.equal(readPem(Buffer.from(pem), 'ca').toString(), pem);
  const dir = mkdtempSync(join(tmpdir(), 'berth-pem-'));
  try {
    writeFileSync(join(dir, 'ca.pem'), pem);
    assert.equal(readPem(join(dir, 'ca.pem'), 'ca').toString(), pem);
    assert.throws(() => readPem(join(dir, 'nope.pem'), 'key'), /tls\.key: cannot read .*nope\.pem.*pass PEM text or a readable file path/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('MCP: a set error is an error; terminal\'s "error": null and a pending approval are not', () => {
  assert.equal(isErrorResult('{"error":"Unknown tool: x"}'), true);
  assert.equal(isErrorResult('{"output":"","exit_code":-1,"error":"Blocked","status":"blocked"}'), true);
  assert.equal(isErrorResult('{"output":"hi","exit_code":0,"error":null}'), false);
  assert.equal(isErrorResult('{"output":"","exit_code":-1,"error":"","status":"pending_approval"}'), false);
  assert.equal(isErrorResult('not json'), false);
  const tool = mcpTool({ type: 'function', function: { name: 't', description: 'd', parameters: { properties: {} } } });
  assert.deepEqual(tool, { name: 't', description: 'd', inputSchema: { properties: {}, type: 'object' } });
});

test('--listen takes HOST:PORT and [v6]:PORT, and says what it wants otherwise', () => {
  assert.deepEqual(parseListen('127.0.0.1:7710'), { host: '127.0.0.1', port: 7710 });
  assert.deepEqual(parseListen('[::1]:0'), { host: '::1', port: 0 });
  assert.throws(() => parseListen('7710'), /--listen must be HOST:PORT, e\.g\. 127\.0\.0\.1:7710; got '7710'/);
  assert.throws(() => parseListen('h:70000'), /HOST:PORT/);
});
