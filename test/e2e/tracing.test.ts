/**
 * OpenTelemetry traces end to end: real `berth serve` (and a split
 * dispatcher + executor) exporting OTLP/protobuf over HTTP to a receiver the
 * test runs on loopback. A client's W3C trace context continues into Berth;
 * tool calls, executor calls, backend operations and execute_code's script
 * calls are spans of one trace; with tracing off nothing is sent and no
 * OpenTelemetry package (the OTLP exporter included) is loaded.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { Metadata, createChannel, createClient, type Channel } from 'nice-grpc';
import { DispatcherDefinition, type DispatcherClient } from '../../services/gen/berth/v1/dispatcher.js';
import { startListeningChild, type ListeningChild } from '../../services/cli/bench/listening-child.js';
import { SPAN_KIND, STATUS_CODE, startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../../services/cli/bench/otlp-receiver.js';
import { pythonBinDir } from '../support/python-bin.js';
import { BERTH_BIN, REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';

/** A client-side span context, as an instrumented client would send it. */
function clientContext() {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  const metadata = Metadata();
  metadata.set('traceparent', `00-${traceId}-${spanId}-01`);
  metadata.set('tracestate', 'vendor=client');
  return { traceId, spanId, metadata };
}

function tracingEnv(receiver: OtlpReceiver): NodeJS.ProcessEnv {
  // A short batch delay so spans arrive while the test waits; the default (5 s) only slows the test.
  return { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY: '50' };
}

const childOf = (spans: ReceivedSpan[], parent: ReceivedSpan | undefined, name: string) =>
  parent && spans.find((s) => s.name === name && s.parentSpanId === parent.spanId && s.traceId === parent.traceId);

function scratchSetup(prefix: string) {
  const scratch = mkdtempSync(join(tmpdir(), prefix));
  const work = join(scratch, 'work');
  mkdirSync(work);
  const config = join(scratch, 'config.yaml');
  writeFileSync(config, `terminal:\n  cwd: ${JSON.stringify(work)}\n`);
  // No login profile and the real python3 first: each new task's shell and script start at once.
  const env = { HOME: scratch, PATH: `${pythonBinDir(scratch)}:${process.env.PATH ?? ''}` };
  return { scratch, config, env };
}

describe('tracing through berth serve', () => {
  let receiver: OtlpReceiver;
  let serve: ServeProcess;
  let setup: ReturnType<typeof scratchSetup>;

  before(async () => {
    receiver = await startOtlpReceiver();
    setup = scratchSetup('berth-e2e-tracing-');
    serve = await startServe(['--config', setup.config], { env: { ...setup.env, ...tracingEnv(receiver) } });
  });

  after(async () => {
    await serve?.stop();
    await receiver?.close();
    if (setup) rmSync(setup.scratch, { recursive: true, force: true });
  });

  test("a tool call continues the client's trace: tool span, executor call, backend operations", async () => {
    const client = clientContext();
    const r = await serve.client.callTool(
      { name: 'terminal', argumentsJson: JSON.stringify({ command: 'echo traced; exit 3' }), taskId: 'trace-me', sessionId: '' },
      { metadata: client.metadata },
    );
    assert.equal((JSON.parse(r.resultJson) as { exit_code: number }).exit_code, 3);

    const spans = await receiver.waitFor('the tool call, its executor call and its backend exec', (all) => {
      const tool = all.find((s) => s.traceId === client.traceId && s.name === 'execute_tool terminal');
      return childOf(all, childOf(all, tool, 'berth.v1.Executor/Exec'), 'local exec') !== undefined;
    });
    const tool = spans.find((s) => s.traceId === client.traceId && s.name === 'execute_tool terminal')!;
    assert.equal(tool.parentSpanId, client.spanId, "the tool span's parent is the client's span");
    assert.equal(tool.traceState, 'vendor=client', "the client's tracestate is kept");
    assert.equal(tool.kind, SPAN_KIND.server);
    assert.equal(tool.resource['service.name'], 'berth');
    assert.deepEqual(tool.attributes, {
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'terminal',
      'berth.tenant.id': 'default',
      'berth.backend': 'local',
      'berth.outcome': 'success',
      'process.exit.code': 3,
    });
    assert.ok(!Object.values(tool.attributes).includes('trace-me'), 'no task id by default');

    const exec = childOf(spans, tool, 'berth.v1.Executor/Exec')!;
    assert.equal(exec.kind, SPAN_KIND.server);
    assert.equal(exec.attributes['rpc.system'], 'grpc');
    assert.equal(exec.attributes['rpc.method'], 'Exec');
    assert.equal(exec.attributes['rpc.grpc.status_code'], 0);
    assert.equal(exec.attributes['berth.backend'], 'local');
    const backendExecs = spans.filter((s) => s.name === 'local exec' && s.parentSpanId === exec.spanId);
    assert.ok(
      backendExecs.some((s) => s.attributes['process.exit.code'] === 3),
      `a backend exec span carries the command's exit code: ${JSON.stringify(backendExecs.map((s) => s.attributes))}`,
    );
    assert.ok(childOf(spans, exec, 'local create_environment'), "the task's first call creates its environment inside the call");
  });

  test("each call on a Session stream is a span of the stream's trace", async () => {
    const client = clientContext();
    async function* requests() {
      for (const callId of ['s1', 's2']) {
        const request = { name: 'terminal', argumentsJson: '{"command":"true"}', taskId: 'trace-session', sessionId: 's' };
        yield { message: { $case: 'call' as const, value: { callId, request } } };
      }
    }
    let results = 0;
    for await (const m of serve.client.session(requests(), { metadata: client.metadata })) {
      if (m.message?.$case === 'result') results += 1;
      if (results === 2) break;
    }
    const spans = await receiver.waitFor('both session calls', (all) =>
      all.filter((s) => s.traceId === client.traceId && s.name === 'execute_tool terminal').length === 2,
    );
    for (const span of spans.filter((s) => s.traceId === client.traceId && s.name === 'execute_tool terminal')) {
      assert.equal(span.parentSpanId, client.spanId);
      assert.equal(span.attributes['berth.outcome'], 'success');
    }
  });

  test('a call under an old tool name is a span of the current name', async () => {
    const client = clientContext();
    const r = await serve.client.callTool(
      { name: 'process', argumentsJson: '{"action":"list"}', taskId: 'trace-names', sessionId: '' },
      { metadata: client.metadata },
    );
    assert.ok(Array.isArray((JSON.parse(r.resultJson) as { processes?: unknown }).processes), r.resultJson);
    const spans = await receiver.waitFor('the process_manage span', (all) =>
      all.some((s) => s.traceId === client.traceId && s.parentSpanId === client.spanId),
    );
    const tool = spans.find((s) => s.traceId === client.traceId && s.parentSpanId === client.spanId)!;
    assert.equal(tool.name, 'execute_tool process_manage');
    assert.equal(tool.attributes['gen_ai.tool.name'], 'process_manage');
  });

  test('a failed call marks its span with the status; without a client context the span is a root', async () => {
    await assert.rejects(
      serve.client.callTool({ name: 'terminal', argumentsJson: '{"command":"true"}', taskId: 'not a valid id!', sessionId: '' }),
      /task_id must be/,
    );
    const [failed] = (await receiver.waitFor('the refused call', (all) => all.some((s) => s.attributes['berth.outcome'] === 'INVALID_ARGUMENT')))
      .filter((s) => s.attributes['berth.outcome'] === 'INVALID_ARGUMENT');
    assert.equal(failed!.name, 'execute_tool terminal');
    assert.equal(failed!.parentSpanId, '');
    assert.equal(failed!.status.code, STATUS_CODE.error);
    assert.equal(failed!.attributes['error.type'], 'INVALID_ARGUMENT');
  });

  test('a malformed traceparent is ignored: the call starts a trace of its own', async () => {
    const traceId = randomBytes(16).toString('hex');
    const metadata = Metadata();
    // Version ff is invalid whatever follows.
    metadata.set('traceparent', `ff-${traceId}-${randomBytes(8).toString('hex')}-01`);
    await serve.client.callTool(
      { name: 'process', argumentsJson: '{"action":"list"}', taskId: 'trace-malformed', sessionId: '' },
      { metadata },
    );
    const spans = await receiver.waitFor('the call with a malformed traceparent', (all) =>
      all.some((s) => s.name === 'execute_tool process_manage' && s.parentSpanId === '' && s.traceId !== traceId),
    );
    assert.ok(!spans.some((s) => s.traceId === traceId), 'no span joined the malformed trace');
  });

  test("an execute_code script's tool calls are child spans of the execute_code call", async () => {
    const client = clientContext();
    const code = 'from hermes_tools import terminal\nprint(terminal("echo from-script")["output"])\n';
    const r = await serve.client.callTool(
      { name: 'execute_code', argumentsJson: JSON.stringify({ code }), taskId: 'trace-code', sessionId: '' },
      { metadata: client.metadata },
    );
    const result = JSON.parse(r.resultJson) as { status: string; output: string };
    assert.equal(result.status, 'success', r.resultJson);

    const spans = await receiver.waitFor("the script's terminal call", (all) => {
      const parent = all.find((s) => s.traceId === client.traceId && s.name === 'execute_tool execute_code');
      return childOf(all, parent, 'execute_tool terminal') !== undefined;
    });
    const parent = spans.find((s) => s.traceId === client.traceId && s.name === 'execute_tool execute_code')!;
    assert.equal(parent.parentSpanId, client.spanId);
    assert.ok(childOf(spans, parent, 'berth.v1.Executor/RunCode'), 'the script run is an executor call of the same trace');
    const nested = childOf(spans, parent, 'execute_tool terminal')!;
    assert.equal(nested.kind, SPAN_KIND.internal);
    assert.equal(nested.attributes['gen_ai.tool.name'], 'terminal');
    assert.equal(nested.attributes['berth.outcome'], 'success');
    assert.equal(nested.attributes['berth.backend'], 'local');
    assert.ok(childOf(spans, nested, 'berth.v1.Executor/Exec'), "the script's call reaches the executor inside its own span");
  });
});

describe('tracing across a split dispatcher and executor', () => {
  let receiver: OtlpReceiver;
  let setup: ReturnType<typeof scratchSetup>;
  let executor: ListeningChild;
  let dispatcher: ListeningChild;
  let channel: Channel;
  let client: DispatcherClient;

  const startBerth = (args: string[], env: NodeJS.ProcessEnv) =>
    startListeningChild({ name: `berth ${args[0]}`, args: [BERTH_BIN, ...args], cwd: REPO_ROOT, env: { ...process.env, ...env }, startTimeoutMs: 20_000 });

  before(async () => {
    receiver = await startOtlpReceiver();
    setup = scratchSetup('berth-e2e-tracing-split-');
    const env = { ...setup.env, ...tracingEnv(receiver), BERTH_EXECUTOR_SECRET: 'split-trace-secret', BERTH_LOG_LEVEL: 'warn' };
    executor = await startBerth(['executor', '--backend', 'local', '--port', '0'], { ...env, BERTH_STATE_ROOT: join(setup.scratch, 'state') });
    const config = join(setup.scratch, 'dispatcher.yaml');
    writeFileSync(config, `executors:\n  - { address: "${executor.address}", backend: local }\n`);
    dispatcher = await startBerth(['dispatcher', '--config', config, '--port', '0'], env);
    channel = createChannel(dispatcher.address);
    client = createClient(DispatcherDefinition, channel);
  });

  after(async () => {
    channel?.close();
    await Promise.all([dispatcher, executor].filter(Boolean).map((s) => s.stop()));
    await receiver?.close();
    if (setup) rmSync(setup.scratch, { recursive: true, force: true });
  });

  test('the trace crosses the gRPC hop: client span in the dispatcher, server span in the executor', async () => {
    const ctx = clientContext();
    await client.callTool(
      { name: 'terminal', argumentsJson: JSON.stringify({ command: 'true' }), taskId: 'split-trace', sessionId: '' },
      { metadata: ctx.metadata },
    );
    const isExecServer = (s: ReceivedSpan) => s.name === 'berth.v1.Executor/Exec' && s.kind === SPAN_KIND.server;
    const spans = await receiver.waitFor('both sides of the Exec call', (all) => {
      const tool = all.find((s) => s.traceId === ctx.traceId && s.name === 'execute_tool terminal');
      const out = childOf(all, tool, 'berth.v1.Executor/Exec');
      const server = out && all.find((s) => isExecServer(s) && s.parentSpanId === out.spanId);
      return childOf(all, server, 'local exec') !== undefined;
    });
    const tool = spans.find((s) => s.traceId === ctx.traceId && s.name === 'execute_tool terminal')!;
    assert.equal(tool.parentSpanId, ctx.spanId);
    assert.equal(tool.resource['service.name'], 'berth-dispatcher');
    const out = childOf(spans, tool, 'berth.v1.Executor/Exec')!;
    assert.equal(out.kind, SPAN_KIND.client);
    assert.equal(out.resource['service.name'], 'berth-dispatcher');
    const server = spans.find((s) => isExecServer(s) && s.parentSpanId === out.spanId)!;
    assert.equal(server.traceId, ctx.traceId);
    assert.equal(server.resource['service.name'], 'berth-executor');
    assert.equal(server.attributes['berth.backend'], 'local');
    assert.equal(childOf(spans, server, 'local exec')!.resource['service.name'], 'berth-executor');
  });
});

describe('tracing off', () => {
  const hook = pathToFileURL(join(REPO_ROOT, 'dist', 'test', 'support', 'otel-module-report.js')).href;

  /** Runs one tool call through a `berth serve` with `env`; returns the OpenTelemetry modules it loaded. */
  async function serveOnce(receiver: OtlpReceiver, env: NodeJS.ProcessEnv): Promise<string[]> {
    const setup = scratchSetup('berth-e2e-tracing-off-');
    const report = join(setup.scratch, 'modules.json');
    try {
      const serve = await startServe([], {
        env: { ...setup.env, ...env, NODE_OPTIONS: `--import=${hook}`, BERTH_TEST_MODULE_REPORT: report },
      });
      try {
        const r = await serve.client.callTool({ name: 'terminal', argumentsJson: '{"command":"true"}', taskId: 'off', sessionId: '' });
        assert.equal((JSON.parse(r.resultJson) as { exit_code: number }).exit_code, 0);
      } finally {
        assert.equal(await serve.stop(), 0, 'berth serve shuts down cleanly');
      }
      assert.ok(existsSync(report), 'the process wrote its module report on exit');
      return JSON.parse(readFileSync(report, 'utf8')) as string[];
    } finally {
      rmSync(setup.scratch, { recursive: true, force: true });
    }
  }

  test('without OTEL_TRACES_EXPORTER nothing is exported and no OpenTelemetry SDK module is loaded', async () => {
    await using receiver = await startOtlpReceiver();
    // An endpoint alone does not turn tracing on: the exporter must be named.
    const loaded = await serveOnce(receiver, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint });
    // The API package (no-op without an SDK) comes with prom-client, for exemplars; the SDK must not.
    assert.deepEqual(loaded.filter((path) => !path.includes(`${sep}@opentelemetry${sep}api${sep}`)), []);
    assert.equal(receiver.requests(), 0);
  });

  test('the same run with tracing on loads the OTLP exporter and flushes its spans on shutdown', async () => {
    await using receiver = await startOtlpReceiver();
    // The default batch delay (5 s) is longer than the run: the spans arrive by the shutdown's flush.
    const loaded = await serveOnce(receiver, { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint });
    assert.ok(loaded.some((path) => path.includes(`${sep}otlp-exporter-base${sep}`)), `the OTLP exporter was loaded: ${loaded.length} modules`);
    assert.ok(receiver.spans().some((s) => s.name === 'execute_tool terminal'), 'the spans were flushed before exit');
  });
});
