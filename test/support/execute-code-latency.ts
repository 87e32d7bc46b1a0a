/**
 * execute_code latency against a running dispatcher, for the bench harness
 * and for quick looks by hand:
 *
 * - hello world: wall time of `execute_code` running `print("hello")`, seen
 *   by the client (dispatch, RunCode stream, probe, launcher, interpreter start);
 * - in-script round trip: one `read_file` from inside a script (stub → socket
 *   → executor → RunCode → dispatcher → read_file → back), timed in Python.
 *
 * Usage by hand: node dist/test/support/execute-code-latency.js --server ADDR [--runs N] [--calls N]
 */
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { createChannel, createClient } from 'nice-grpc';
import { DispatcherDefinition, type DispatcherClient } from '../../services/gen/berth/v1/dispatcher.js';

export interface ExecuteCodeLatencyOptions {
  /** Task the scripts run in; created on first use. */
  readonly taskId?: string;
  /** execute_code hello-world runs (after one warm-up). */
  readonly helloRuns?: number;
  /** read_file calls made inside one script. */
  readonly roundTrips?: number;
  /** File the round-trip script reads (written first with write_file). */
  readonly file?: string;
}

export interface ExecuteCodeLatency {
  /** Client-side wall times of the hello-world runs, ms, ascending. */
  readonly helloWorldMs: readonly number[];
  /** In-script read_file round trips, ms, ascending. */
  readonly roundTripMs: readonly number[];
  readonly helloWorldP50Ms: number;
  readonly roundTripP50Ms: number;
}

const CALLS_PER_SCRIPT = 40;

function median(sorted: readonly number[]): number {
  if (sorted.length === 0) return Number.NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

async function execute(client: DispatcherClient, taskId: string, code: string): Promise<string> {
  const r = await client.callTool({ name: 'execute_code', argumentsJson: JSON.stringify({ code }), taskId, sessionId: '' });
  const result = JSON.parse(r.resultJson) as { status?: string; output?: string };
  if (result.status !== 'success') throw new Error(`execute_code failed: ${r.resultJson.slice(0, 500)}`);
  return result.output ?? '';
}

/** Measures both figures against `client` (a Dispatcher client of a running server). */
export async function measureExecuteCodeLatency(
  client: DispatcherClient,
  options: ExecuteCodeLatencyOptions = {},
): Promise<ExecuteCodeLatency> {
  const taskId = options.taskId ?? 'execute-code-latency';
  const runs = options.helloRuns ?? 20;
  const calls = options.roundTrips ?? 200;
  const file = options.file ?? '/tmp/berth-execute-code-latency.txt';
  await client.callTool({
    name: 'write_file',
    argumentsJson: JSON.stringify({ path: file, content: 'one line\n' }),
    taskId,
    sessionId: '',
  });
  await execute(client, taskId, 'print("warm-up")');
  const hello: number[] = [];
  for (let i = 0; i < runs; i++) {
    const started = performance.now();
    await execute(client, taskId, 'print("hello")');
    hello.push(performance.now() - started);
  }
  // One script may make at most code_execution.max_tool_calls calls (50 by default): split into scripts of 40.
  const script = (n: number) => `import json, time
from hermes_tools import read_file
lat = []
for _ in range(${n}):
    t = time.perf_counter()
    r = read_file(${JSON.stringify(file)})
    lat.append((time.perf_counter() - t) * 1000)
    if r.get("error"):
        raise SystemExit("read_file failed: " + json.dumps(r))
print(json.dumps(lat))
`;
  const roundTrips: number[] = [];
  for (let left = calls; left > 0; left -= CALLS_PER_SCRIPT) {
    roundTrips.push(...(JSON.parse(await execute(client, taskId, script(Math.min(left, CALLS_PER_SCRIPT)))) as number[]));
  }
  hello.sort((a, b) => a - b);
  roundTrips.sort((a, b) => a - b);
  return { helloWorldMs: hello, roundTripMs: roundTrips, helloWorldP50Ms: median(hello), roundTripP50Ms: median(roundTrips) };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { server: { type: 'string' }, runs: { type: 'string' }, calls: { type: 'string' } },
    strict: true,
  });
  const channel = createChannel(values.server ?? process.env.BERTH_SERVER ?? '127.0.0.1:7700');
  try {
    const r = await measureExecuteCodeLatency(createClient(DispatcherDefinition, channel), {
      ...(values.runs ? { helloRuns: Number(values.runs) } : {}),
      ...(values.calls ? { roundTrips: Number(values.calls) } : {}),
    });
    console.log(
      JSON.stringify({
        helloWorldP50Ms: Math.round(r.helloWorldP50Ms * 10) / 10,
        roundTripP50Ms: Math.round(r.roundTripP50Ms * 100) / 100,
        helloRuns: r.helloWorldMs.length,
        roundTrips: r.roundTripMs.length,
      }),
    );
  } finally {
    channel.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
