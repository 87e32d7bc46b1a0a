/**
 * What a test run left behind, found at its end (test/run.sh runs this after
 * the tiers): processes that carry the run's marker (BERTH_TEST_RUN in their
 * environment: servers, apptainer-double instances, background commands),
 * files left in the run's own temp directory (its TMPDIR), and Docker
 * containers whose bind mounts come from that directory. Those belong to the
 * run beyond doubt. Containers, networks and volumes with Berth's labels
 * made since the run started are its leftovers too when no other test run
 * was seen meanwhile (the Docker engine is shared); when one was, they are
 * named as possible leftovers without failing the run.
 *
 *   node dist/test/support/leftover-check.js watch FILE   record other test runs seen, every 10 s
 *   node dist/test/support/leftover-check.js check SINCE_MS FILE
 */
import { readFileSync, readdirSync, appendFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Docker from 'dockerode';

const RUN = process.env.BERTH_TEST_RUN ?? '';
const RUN_DIR = process.env.BERTH_TEST_RUN_DIR ?? '';
/** Files in the run directory that are not the tests': the check's own, and testcontainers' port lock. */
const OWN_FILES = /^(\.other-runs|\.tap|testcontainers-node-\d+\.lock)$/;

interface ProcessInfo {
  readonly pid: number;
  readonly ppid: number;
  readonly cmdline: string;
  readonly run: string | undefined;
}

function processes(): ProcessInfo[] {
  const out: ProcessInfo[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const environ = readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0');
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ').trim();
      const run = environ.find((e) => e.startsWith('BERTH_TEST_RUN='))?.slice('BERTH_TEST_RUN='.length);
      out.push({ pid: Number(entry), ppid, cmdline, run });
    } catch {
      // gone meanwhile, or a kernel thread
    }
  }
  return out;
}

/** This process and the ones that started it (test/run.sh): carriers of the marker that are no leftovers. */
function ancestors(all: readonly ProcessInfo[]): Set<number> {
  const byPid = new Map(all.map((p) => [p.pid, p]));
  const seen = new Set<number>();
  for (let pid = process.pid; pid > 1 && !seen.has(pid); pid = byPid.get(pid)?.ppid ?? 0) seen.add(pid);
  return seen;
}

/** Other test runs alive now: another marker, or node's test runner over another checkout's tests. */
function otherRuns(): string[] {
  return processes()
    .filter((p) => (p.run !== undefined && p.run !== RUN) || (p.run === undefined && /node .*--test .*dist\/test\//.test(p.cmdline)))
    .map((p) => `${p.pid} ${p.cmdline.slice(0, 160)}`);
}

async function watch(file: string): Promise<void> {
  for (;;) {
    const others = otherRuns();
    if (others.length > 0) appendFileSync(file, `${others.join('\n')}\n`);
    await sleep(10_000);
  }
}

/** The run's marked processes still alive, after giving ones that are exiting a few seconds. */
async function leftoverProcesses(): Promise<string[]> {
  let left: ProcessInfo[] = [];
  for (let i = 0; i < 20; i++) {
    const all = processes();
    const mine = ancestors(all);
    left = all.filter((p) => p.run === RUN && !mine.has(p.pid));
    if (left.length === 0) return [];
    await sleep(500);
  }
  return left.map((p) => `process ${p.pid}: ${p.cmdline.slice(0, 200)}`);
}

function leftoverFiles(): string[] {
  if (!RUN_DIR || !existsSync(RUN_DIR)) return [];
  return readdirSync(RUN_DIR)
    .filter((name) => !OWN_FILES.test(name))
    .map((name) => `temp file or directory ${join(RUN_DIR, name)}`);
}

const BERTH_LABEL = /^(berth\.|org\.testcontainers)/;

async function leftoverDocker(sinceMs: number): Promise<{ certain: string[]; possible: string[] }> {
  const docker = new Docker();
  const certain: string[] = [];
  const possible: string[] = [];
  try {
    await docker.ping();
  } catch {
    return { certain, possible };
  }
  for (const c of await docker.listContainers({ all: true })) {
    const name = `container ${c.Names[0] ?? c.Id.slice(0, 12)} (${c.Image}, ${c.State})`;
    if (RUN_DIR && c.Mounts.some((m) => m.Source?.startsWith(`${RUN_DIR}/`))) certain.push(`${name}: mounts the run's temp directory`);
    else if (c.Created * 1000 >= sinceMs && Object.keys(c.Labels ?? {}).some((l) => BERTH_LABEL.test(l))) possible.push(name);
  }
  for (const n of await docker.listNetworks()) {
    const created = Date.parse((n as { Created?: string }).Created ?? '');
    if (created >= sinceMs && Object.keys(n.Labels ?? {}).some((l) => BERTH_LABEL.test(l))) possible.push(`network ${n.Name}`);
  }
  const { Volumes } = await docker.listVolumes();
  for (const v of Volumes ?? []) {
    const created = Date.parse((v as { CreatedAt?: string }).CreatedAt ?? '');
    if (created >= sinceMs && Object.keys(v.Labels ?? {}).some((l) => BERTH_LABEL.test(l))) possible.push(`volume ${v.Name}`);
  }
  return { certain, possible };
}

async function check(sinceMs: number, othersFile: string): Promise<number> {
  const others = [...new Set([...(existsSync(othersFile) ? readFileSync(othersFile, 'utf8').split('\n') : []), ...otherRuns()].filter(Boolean))];
  const docker = await leftoverDocker(sinceMs);
  const certain = [...(await leftoverProcesses()), ...leftoverFiles(), ...docker.certain];
  const possible = others.length === 0 ? [] : docker.possible;
  if (others.length === 0) certain.push(...docker.possible);
  for (const line of certain) process.stdout.write(`# leftover: ${line}\n`);
  if (possible.length > 0) {
    process.stdout.write(`# ${possible.length} Berth objects made since the run started may be another test run's (${others.length} seen meanwhile), not counted:\n`);
    for (const line of possible) process.stdout.write(`#   possible leftover: ${line}\n`);
  }
  if (certain.length > 0) {
    process.stdout.write(`# the run left ${certain.length} things behind: the tests that made them must remove them\n`);
    return 1;
  }
  process.stdout.write('# nothing left behind\n');
  return 0;
}

const [mode, a, b] = process.argv.slice(2);
if (!RUN) {
  process.stderr.write('leftover-check: BERTH_TEST_RUN is not set (test/run.sh sets it)\n');
  process.exit(2);
}
if (mode === 'watch' && a) await watch(a);
else if (mode === 'check' && a && b) process.exit(await check(Number(a), b));
else {
  process.stderr.write('usage: leftover-check.js watch FILE | check SINCE_MS FILE\n');
  process.exit(2);
}
