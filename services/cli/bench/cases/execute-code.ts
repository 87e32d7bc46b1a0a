/**
 * execute_code: a hello-world script against the same Python one-liner run
 * with the terminal tool on the same task (what the script costs beyond
 * starting Python), and a script calling a tool in a loop, each call timed
 * inside the script, against the same tool called with CallTool from the
 * client. Targets: a hello-world p50 ≤ 100 ms on a warm task, and an
 * in-script tool round trip p50 ≤ 2 ms plus the tool's cost.
 *
 * Runs on the docker backend when it is built (where scripts run in the task
 * container), else on local; skipped until the execute_code tool is registered.
 */
import { performance } from 'node:perf_hooks';
import type { BenchCase, BenchContext, Skip } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { concurrentRound, runTerminal, unmeasured } from '../case-helpers.js';
import { DOCKER_SERVER } from '../docker-helpers.js';
import { formatMs } from '../stats.js';

const CALLS_PER_SCRIPT = 20;
const FILE = '/tmp/berth-bench-roundtrip.txt';
/**
 * Lines of FILE. Every read takes a line no earlier read took (until the
 * counter wraps): read_file answers a repeated read of an unchanged region
 * with a short "unchanged" stub, then refuses it, as upstream Hermes does,
 * which would measure the guard instead of the read.
 */
const FILE_LINES = 50_000;
let nextLine = 1;
/** The first of `n` lines no recent read took. */
function freshLines(n: number): number {
  if (nextLine + n > FILE_LINES) nextLine = 1;
  const first = nextLine;
  nextLine += n;
  return first;
}
/** The baseline runs the script from a file: `python3 -c` would ask for approval (script via -c). */
const HELLO_FILE = '/tmp/berth-bench-hello.py';
const HELLO = 'print("hello")';

interface CodeResult {
  status?: string;
  output?: string;
  error?: string;
}

async function runCode(server: BenchServer, task: string, code: string): Promise<string> {
  const json = await server.call('execute_code', { code }, task);
  const r = JSON.parse(json) as CodeResult;
  if (r.status !== 'success') throw new Error(`execute_code failed: ${json.slice(0, 400)}`);
  return r.output ?? '';
}

async function writeFile(server: BenchServer, task: string, path: string, content: string): Promise<void> {
  const json = await server.call('write_file', { path, content }, task);
  if ((JSON.parse(json) as { error?: unknown }).error) throw new Error(`write_file failed: ${json.slice(0, 300)}`);
}

async function codeServer(ctx: BenchContext): Promise<BenchServer | Skip> {
  const docker = (await ctx.backendMissing('docker')) === undefined;
  const server = await ctx.server(docker ? DOCKER_SERVER : {});
  if (!(await server.offers('execute_code', ['code_execution']))) return { skip: 'execute_code tool not registered yet' };
  return server;
}

const roundTripScript = (firstLine: number) => `import json, time
from hermes_tools import read_file
lat = []
for i in range(${CALLS_PER_SCRIPT}):
    t = time.perf_counter()
    r = read_file(${JSON.stringify(FILE)}, offset=${firstLine} + i, limit=1)
    lat.append((time.perf_counter() - t) * 1000)
    if isinstance(r, dict) and r.get("error"):
        raise SystemExit("read_file failed: " + json.dumps(r))
print(json.dumps(lat))
`;

export default function cases(): BenchCase[] {
  let helloServer: BenchServer | undefined;
  let rtServer: BenchServer | undefined;
  const helloTask = 'bench-code-hello';
  const rtTask = 'bench-code-roundtrip';
  return [
    {
      kind: 'latency',
      name: 'execute_code `print("hello")`',
      baselineName: `terminal \`python3 ${HELLO_FILE}\` (the same script), same task`,
      plan: { quick: { warmupPairs: 3, pairs: 60, minPairs: 10, budgetMs: 10_000 } },
      targets: [
        {
          target: 'hello-world execute_code on a warm task: p50 ≤ 100 ms',
          judge: (r) => ({
            measured: `p50 ${formatMs(r.latency!.a.p50)}; Python alone by terminal ${formatMs(r.latency!.b.p50)}`,
            met: r.latency!.a.p50 <= 100,
          }),
        },
      ],
      async setup(ctx) {
        const s = await codeServer(ctx);
        if ('skip' in s) return s;
        helloServer = s;
        await unmeasured(ctx, `writing ${HELLO_FILE}`, () => writeFile(s, helloTask, HELLO_FILE, `${HELLO}\n`));
        if ((await runCode(s, helloTask, HELLO)).trim() !== 'hello') throw new Error('hello script printed something else');
        return undefined;
      },
      runA: () => runCode(helloServer!, helloTask, HELLO).then(() => undefined),
      runB: () => runTerminal(helloServer!, helloTask, `python3 ${HELLO_FILE}`),
      async teardown() {
        if (helloServer === undefined) return;
        await runTerminal(helloServer, helloTask, `rm -f ${HELLO_FILE}`).catch(() => undefined);
        await helloServer.endTask(helloTask);
      },
    },
    {
      kind: 'load',
      name: `execute_code, ${CALLS_PER_SCRIPT} × read_file from the script, timed in it`,
      baselineName: `${CALLS_PER_SCRIPT} × CallTool read_file from the client`,
      concurrency: 1,
      plan: { quick: { warmupPairs: 1, pairs: 8, minPairs: 3 }, full: { warmupPairs: 2 } },
      targets: [
        {
          // B, the same tool by CallTool from the client, stands for "the tool's cost" (plus one client hop).
          target: "in-script tool round trip: p50 ≤ 2 ms plus the tool's cost",
          judge: (r) => {
            const a = r.load!.a.latency.p50;
            const b = r.load!.b.latency.p50;
            return {
              measured: `p50 ${formatMs(a)} in the script; the same read_file by CallTool ${formatMs(b)} (${a >= b ? '+' : '−'}${formatMs(Math.abs(a - b))})`,
              met: a - b <= 2,
            };
          },
        },
      ],
      async setup(ctx) {
        const s = await codeServer(ctx);
        if ('skip' in s) return s;
        rtServer = s;
        await unmeasured(ctx, `writing ${FILE}`, () => writeFile(s, rtTask, FILE, 'hello\n'.repeat(FILE_LINES)));
        return undefined;
      },
      async runA() {
        const t0 = performance.now();
        const output = await runCode(rtServer!, rtTask, roundTripScript(freshLines(CALLS_PER_SCRIPT)));
        const elapsedMs = performance.now() - t0;
        const latenciesMs = JSON.parse(output.trim()) as number[];
        return { latenciesMs, elapsedMs, errors: 0 };
      },
      runB: () =>
        concurrentRound(1, CALLS_PER_SCRIPT, async () => {
          const r = await rtServer!.call('read_file', { path: FILE, offset: freshLines(1), limit: 1 }, rtTask);
          if (r.startsWith('{"error"')) throw new Error(`read_file failed: ${r.slice(0, 200)}`);
        }),
      async teardown() {
        if (rtServer === undefined) return;
        await runTerminal(rtServer, rtTask, `rm -f ${FILE}`).catch(() => undefined);
        await rtServer.endTask(rtTask);
      },
    },
  ];
}
