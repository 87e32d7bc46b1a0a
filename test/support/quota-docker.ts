/**
 * A private Docker daemon whose storage enforces disk limits, so tests can
 * check `terminal.container_disk` for real: the btrfs storage driver on a
 * btrfs file system (a loop-mounted image file), where Docker caps a
 * container with a btrfs qgroup (`HostConfig.StorageOpt: {size}`).
 *
 * Why: the main daemon keeps its data on ext4 with overlay2, where Docker
 * refuses every disk limit ("--storage-opt is supported only for overlay
 * over xfs with 'pquota' mount option"; volumes: "quota size requested but
 * no quota support"). overlay2 on XFS mounted with pquota would enforce both,
 * but the kernels these tests run on may lack XFS quota support
 * (CONFIG_XFS_QUOTA), while btrfs qgroups are in the kernel. On btrfs the
 * limit counts the image's files as well as what the container writes, and
 * the local volume driver still cannot limit a volume.
 *
 * How: a sparse image file in a temp dir is formatted as btrfs and
 * loop-mounted, and a second dockerd runs with its data root there, in a
 * network namespace of its own (`unshare --net`): its docker0 bridge lives
 * there, and it can never touch the host's. (A daemon started with
 * `--bridge=none` in the host's namespace deletes the host's docker0 link,
 * which breaks the main daemon's bridge networking until it restarts.) It
 * has its own exec root, containerd, pidfile and socket, an empty config
 * file (not /etc/docker/daemon.json) and no iptables or ip_forward changes.
 * Images are copied from the main daemon (`docker save | docker load`);
 * nothing is pulled. Its containers reach nothing outside that namespace.
 *
 * One fixture runs at a time on a host: a lock file makes other test
 * processes wait. Starting one first removes leftovers of a run that crashed
 * (daemons, mounts, loop devices and directories with `berth-quota-` in
 * their path); a fixture whose stop() was never called is torn down when the
 * process exits.
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  accessSync,
  chmodSync,
  closeSync,
  constants,
  linkSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { release, tmpdir } from 'node:os';
import { basename, delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import Dockerode from 'dockerode';
import { toolsRequired } from './require-tools.js';

/** Every path the fixture creates contains this, so leftovers of a crashed run can be found. */
const MARKER = 'berth-quota-';
const TEMP_PREFIX = `${MARKER}docker-`;
/** Exec roots are /run/berth-quota-<hex>: short, because unix socket paths are limited to ~107 bytes. */
const RUN_PARENT = '/run';
const RUN_DIR_NAME = /^berth-quota-[0-9a-f]{12}$/;
const LOCK_FILE = join(RUN_PARENT, `${MARKER}docker.lock`);
const IMAGE_BYTES = 3 * 1024 ** 3;
const START_TIMEOUT_MS = 60_000;
const STOP_GRACE_MS = 15_000;
const LOCK_TIMEOUT_MS = 10 * 60_000;

const execFileAsync = promisify(execFile);

/** Tools the fixture runs, with how to install each on Debian. */
const TOOLS = {
  'mkfs.btrfs': 'apt-get install -y btrfs-progs',
  dockerd: 'apt-get install -y docker.io',
  docker: 'apt-get install -y docker.io',
  losetup: 'apt-get install -y mount',
  unshare: 'apt-get install -y util-linux',
  mount: 'apt-get install -y mount',
  umount: 'apt-get install -y mount',
} as const;
type Tool = keyof typeof TOOLS;
type Tools = Record<Tool, string>;

/** Why the fixture cannot run here, or undefined. Under make test or CI (toolsRequired()) it throws instead: tests must fail, not skip, once set-up ran. */
export function quotaDockerUnavailableReason(): string | undefined {
  const reason = whyUnavailable() ?? kernelLacksBtrfs();
  if (reason && toolsRequired()) throw new Error(reason);
  return reason;
}

export interface QuotaDocker extends AsyncDisposable {
  /** Path of the private daemon's API socket. */
  readonly socketPath: string;
  /** Stops the daemon, unmounts and removes everything the fixture created. Idempotent. */
  stop(): Promise<void>;
}

/** Starts the daemon and copies `images` into it from the main daemon (docker save | docker load; nothing is pulled). */
export async function startQuotaDocker(options: { images: readonly string[] }): Promise<QuotaDocker> {
  const reason = quotaDockerUnavailableReason();
  if (reason) throw new Error(`cannot start the quota Docker fixture: ${reason}`);
  const tools = findTools() as Tools;
  await acquireLock();
  let paths: Paths;
  try {
    await removeLeftovers(tools);
    paths = makePaths();
  } catch (err) {
    releaseLock();
    throw err;
  }
  const match = matchesAny([paths.dir, paths.runDir]);
  const onExit = () => tearDownNow(tools, match, paths);
  process.on('exit', onExit);
  let daemon: ChildProcess | undefined;
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      try {
        if (daemon) await stopDaemon(daemon);
        const { failed } = await cleanUp(tools, match, [paths.dir, paths.runDir]);
        if (failed.length > 0) {
          throw new Error(`quota Docker fixture: could not clean up (${failed.join('; ')}); remove these by hand`);
        }
      } finally {
        process.off('exit', onExit);
        releaseLock();
      }
    })());
  try {
    await mountBtrfs(tools, paths);
    daemon = startDaemon(tools, paths);
    await waitUntilAnswering(daemon, paths);
    await checkStorage(paths);
    for (const image of options.images) await copyImage(tools, image, paths.socketPath);
    openLayerRoots(paths);
  } catch (err) {
    await stop().catch((cleanupErr: unknown) => console.error((cleanupErr as Error).message));
    throw err;
  }
  return { socketPath: paths.socketPath, stop, [Symbol.asyncDispose]: stop };
}

// --- availability -----------------------------------------------------------

function whyUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) {
    return 'the quota Docker fixture needs root (it mounts a filesystem and starts a dockerd); run the tests as root';
  }
  const tools = findTools();
  for (const tool of Object.keys(TOOLS) as Tool[]) {
    if (!tools[tool]) return `${tool} is not installed; run \`${TOOLS[tool]}\``;
  }
  const version = spawnSync(tools.docker!, ['version', '--format', '{{.Server.Version}}'], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  if (version.status !== 0) {
    const why = (version.stderr || version.error?.message || `exit ${version.status}`).trim();
    return `the main Docker daemon does not answer (${why}); start it with scripts/ensure-docker.sh`;
  }
  return undefined;
}

/** Absolute paths of the tools found in PATH (or the sbin directories a non-login root shell may lack). */
function findTools(): Partial<Tools> {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/local/sbin', '/usr/sbin', '/sbin'];
  const found: Partial<Tools> = {};
  for (const tool of Object.keys(TOOLS) as Tool[]) {
    found[tool] = dirs.map((d) => join(d, tool)).find(isExecutable);
  }
  return found;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** Why the running kernel cannot mount btrfs, when /proc/filesystems says so. */
function kernelLacksBtrfs(): string | undefined {
  const known = readFileSync('/proc/filesystems', 'utf8');
  if (/\sbtrfs$/m.test(known)) return undefined;
  if (spawnSync('modprobe', ['btrfs']).status === 0) return undefined;
  return `the running kernel (${release()}) has no btrfs (not in /proc/filesystems, and modprobe btrfs failed)`;
}

// --- one fixture at a time --------------------------------------------------

/** Takes the host-wide lock, waiting while another live process holds it. */
async function acquireLock(): Promise<void> {
  const deadline = Date.now() + LOCK_TIMEOUT_MS;
  // Written in full first, then linked: a reader never sees an empty lock file.
  const mine = `${LOCK_FILE}.${process.pid}`;
  writeFileSync(mine, `${process.pid}\n`);
  try {
    for (;;) {
      try {
        linkSync(mine, LOCK_FILE);
        return;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const holder = lockHolder();
      if (holder === undefined || !isAlive(holder)) {
        rmSync(LOCK_FILE, { force: true });
        continue;
      }
      if (Date.now() > deadline) {
        throw new Error(
          `another quota Docker fixture (pid ${holder}) held ${LOCK_FILE} for ${LOCK_TIMEOUT_MS / 60_000} minutes; ` +
            'run tests using it one at a time, or end that process if it is stuck',
        );
      }
      await sleep(500);
    }
  } finally {
    rmSync(mine, { force: true });
  }
}

function releaseLock(): void {
  if (lockHolder() === process.pid) rmSync(LOCK_FILE, { force: true });
}

function lockHolder(): number | undefined {
  try {
    const pid = Number(readFileSync(LOCK_FILE, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

// --- the filesystem and the daemon ------------------------------------------

interface Paths {
  /** The temp dir: image file, mount point, daemon config and log. */
  readonly dir: string;
  readonly image: string;
  readonly mnt: string;
  readonly configFile: string;
  readonly logFile: string;
  /** The daemon's exec root; holds its socket, pidfile and containerd state. */
  readonly runDir: string;
  readonly socketPath: string;
}

function makePaths(): Paths {
  const dir = mkdtempSync(join(tmpdir(), TEMP_PREFIX));
  const runDir = join(RUN_PARENT, `${MARKER}${randomBytes(6).toString('hex')}`);
  mkdirSync(runDir, { mode: 0o700 });
  return {
    dir,
    image: join(dir, 'btrfs.img'),
    mnt: join(dir, 'mnt'),
    configFile: join(dir, 'daemon.json'),
    logFile: join(dir, 'dockerd.log'),
    runDir,
    socketPath: join(runDir, 'docker.sock'),
  };
}

async function mountBtrfs(tools: Tools, paths: Paths): Promise<void> {
  writeFileSync(paths.image, '');
  truncateSync(paths.image, IMAGE_BYTES); // sparse: takes no disk space until written
  await run(tools['mkfs.btrfs'], ['-q', '-f', paths.image]);
  mkdirSync(paths.mnt);
  await run(tools.mount, ['-o', 'loop', paths.image, paths.mnt]).catch((err: Error) => {
    throw new Error(`${err.message} (see dmesg: the kernel needs loop devices and btrfs)`);
  });
}

function startDaemon(tools: Tools, paths: Paths): ChildProcess {
  writeFileSync(paths.configFile, '{}\n');
  const args = [
    `--data-root=${join(paths.mnt, 'docker')}`,
    `--exec-root=${paths.runDir}`,
    `--pidfile=${join(paths.runDir, 'docker.pid')}`,
    `--host=unix://${paths.socketPath}`,
    `--config-file=${paths.configFile}`,
    '--storage-driver=btrfs',
    '--iptables=false',
    '--ip6tables=false',
    '--ip-forward=false',
    '--ip-masq=false',
    // Stopping must fit in STOP_GRACE_MS even with containers left running.
    '--shutdown-timeout=5',
  ];
  const log = openSync(paths.logFile, 'a');
  try {
    // unshare execs dockerd in place: the child's pid is dockerd's.
    const child = spawn(tools.unshare, ['--net', '--', tools.dockerd, ...args], { env: daemonEnv(), stdio: ['ignore', log, log] });
    child.unref(); // a fixture never stopped must not keep the process alive; the exit hook ends it
    return child;
  } finally {
    closeSync(log);
  }
}

/** SIGTERM (dockerd then stops its containers and containerd), SIGKILL after STOP_GRACE_MS. */
async function stopDaemon(daemon: ChildProcess): Promise<void> {
  if (daemon.pid === undefined || daemon.exitCode !== null || daemon.signalCode !== null) return;
  const exited = new Promise((resolve) => daemon.once('exit', resolve));
  daemon.kill('SIGTERM');
  const timer = setTimeout(() => daemon.kill('SIGKILL'), STOP_GRACE_MS);
  await exited;
  clearTimeout(timer);
}

/** The environment without what would point dockerd elsewhere or make it notify systemd. */
function daemonEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('DOCKER_') && k !== 'NOTIFY_SOCKET'),
  );
}

async function waitUntilAnswering(daemon: ChildProcess, paths: Paths): Promise<void> {
  let ended: string | undefined;
  daemon.once('exit', (code, signal) => (ended = `exited (${signal ?? `code ${code}`})`));
  daemon.once('error', (err) => (ended = `could not be started (${err.message})`));
  const docker = new Dockerode({ socketPath: paths.socketPath, timeout: 5_000 });
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (ended === undefined) {
    try {
      await docker.ping();
      return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      throw new Error(
        `the quota dockerd did not answer on ${paths.socketPath} within ${START_TIMEOUT_MS / 1000} s; ` +
          `its log ends:\n${logTail(paths.logFile)}`,
      );
    }
    await sleep(250);
  }
  throw new Error(`the quota dockerd ${ended} while starting; its log ends:\n${logTail(paths.logFile)}`);
}

/** Fails unless the daemon really runs the btrfs driver, whose qgroups enforce the limits under test. */
async function checkStorage(paths: Paths): Promise<void> {
  const docker = new Dockerode({ socketPath: paths.socketPath, timeout: 10_000 });
  const info = (await docker.info()) as { Driver?: string };
  if (info.Driver !== 'btrfs') {
    throw new Error(
      `the quota dockerd uses storage driver ${info.Driver ?? 'unknown'}, not btrfs; its log ends:\n${logTail(paths.logFile)}`,
    );
  }
}

/**
 * Docker's btrfs driver leaves the root directory of each layer it loads
 * with `docker load` at mode 0700 (the saved layers carry no entry for "/"),
 * and a container's root is a snapshot of its image's top layer: a non-root
 * container user then cannot even stat /bin/sh ("permission denied" from
 * runc). Images built on such a daemon carry the mode of their base; these
 * are loaded, so their layer roots get the 0755 every image's "/" has.
 */
function openLayerRoots(paths: Paths): void {
  const subvolumes = join(paths.mnt, 'docker', 'btrfs', 'subvolumes');
  for (const name of readdirSync(subvolumes)) chmodSync(join(subvolumes, name), 0o755);
}

/** `docker save IMAGE | docker -H unix://SOCKET load`. */
async function copyImage(tools: Tools, image: string, socketPath: string): Promise<void> {
  const save = spawn(tools.docker, ['save', image], { stdio: ['ignore', 'pipe', 'pipe'] });
  // save's stdout goes straight to load: nothing in this process may read it.
  const load = spawn(tools.docker, ['-H', `unix://${socketPath}`, 'load', '--quiet'], {
    stdio: [save.stdout, 'ignore', 'pipe'],
  });
  save.stdout.destroy(); // load has its own copy; ours would keep save's 'close' from ever firing
  const [saved, loaded] = await Promise.all([outcome(save), outcome(load)]);
  if (saved.code !== 0) {
    throw new Error(
      `docker save ${image} failed on the main daemon (${saved.stderr.trim()}); ` +
        'is the image there? build it first (e.g. make image)',
    );
  }
  if (loaded.code !== 0) {
    throw new Error(`docker load of ${image} into the quota dockerd failed (${loaded.stderr.trim()})`);
  }
}

function outcome(child: ChildProcess): Promise<{ code: number | null; stderr: string }> {
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((resolve) => {
    child.once('error', (err) => resolve({ code: -1, stderr: err.message }));
    child.once('close', (code) => resolve({ code, stderr }));
  });
}

// --- cleanup ----------------------------------------------------------------

type Matcher = (text: string) => boolean;

/** Whether a command line, mount point or file name is `path` or inside it. */
function matchesAny(paths: readonly string[]): Matcher {
  return (text) => paths.some((p) => `${text}\0`.includes(`${p}/`) || `${text}\0`.includes(`${p}\0`));
}

/** Removes what an earlier run that crashed left behind. Only called while holding the lock. */
async function removeLeftovers(tools: Tools): Promise<void> {
  const dirs = [
    ...childDirs(tmpdir(), (name) => name.startsWith(TEMP_PREFIX)),
    ...childDirs(RUN_PARENT, (name) => RUN_DIR_NAME.test(name)),
  ];
  const { cleaned, failed } = await cleanUp(tools, (text) => text.includes(MARKER), dirs);
  if (cleaned.length > 0) console.warn(`quota Docker fixture: removed leftovers of an earlier run: ${cleaned.join(', ')}`);
  if (failed.length > 0) console.warn(`quota Docker fixture: could not remove leftovers: ${failed.join('; ')}`);
}

function childDirs(parent: string, want: (name: string) => boolean): string[] {
  try {
    return readdirSync(parent, { withFileTypes: true })
      .filter((e) => e.isDirectory() && want(e.name))
      .map((e) => join(parent, e.name));
  } catch {
    return [];
  }
}

/**
 * Stops matching daemons (dockerd gracefully, so it stops its containers),
 * then whatever of their containerd, shims and containers outlives them;
 * unmounts matching mounts, detaches matching loop devices and removes
 * `dirs`. Returns what was cleaned and what could not be.
 */
async function cleanUp(
  tools: Tools,
  match: Matcher,
  dirs: readonly string[],
): Promise<{ cleaned: string[]; failed: string[] }> {
  const cleaned: string[] = [];
  const failed: string[] = [];
  const dockerds = daemonProcesses(match)
    .filter((p) => basename(p.argv[0] ?? '') === 'dockerd')
    .map((p) => p.pid);
  await terminate(dockerds, STOP_GRACE_MS);
  const rest = withDescendants(daemonProcesses(match).map((p) => p.pid));
  await terminate(rest, 5_000);
  for (const pid of [...dockerds, ...rest]) {
    if (isAlive(pid)) failed.push(`process ${pid} survived SIGKILL`);
    else cleaned.push(`process ${pid}`);
  }
  for (const mountPoint of mountPoints(match)) {
    const error = await unmount(tools, mountPoint);
    if (error) failed.push(error);
    else cleaned.push(`mount ${mountPoint}`);
  }
  for (const device of loopDevices(tools, match)) {
    const result = spawnSync(tools.losetup, ['-d', device], { encoding: 'utf8' });
    if (result.status === 0) cleaned.push(`loop device ${device}`);
    else failed.push(`losetup -d ${device}: ${result.stderr.trim()}`);
  }
  const stillMounted = mountPoints(match);
  for (const dir of dirs) {
    if (stillMounted.some((m) => matchesAny([dir])(m))) {
      failed.push(`${dir} not removed: something is still mounted in it`);
      continue;
    }
    rmSync(dir, { recursive: true, force: true });
    cleaned.push(dir);
  }
  return { cleaned, failed };
}

/** Last resort when the process exits without stop(): kill, lazily unmount, detach, remove. */
function tearDownNow(tools: Tools, match: Matcher, paths: Paths): void {
  for (const pid of withDescendants(daemonProcesses(match).map((p) => p.pid))) signal(pid, 'SIGKILL');
  for (const mountPoint of mountPoints(match)) spawnSync(tools.umount, ['-l', mountPoint]);
  for (const device of loopDevices(tools, match)) spawnSync(tools.losetup, ['-d', device]);
  for (const dir of [paths.dir, paths.runDir]) rmSync(dir, { recursive: true, force: true });
  releaseLock();
}

/** umount, retried while busy, then lazily; returns an error message or undefined. */
async function unmount(tools: Tools, mountPoint: string): Promise<string | undefined> {
  let stderr = '';
  for (let attempt = 0; attempt < 5; attempt++) {
    const result = spawnSync(tools.umount, [mountPoint], { encoding: 'utf8' });
    if (result.status === 0 || !isMounted(mountPoint)) return undefined;
    stderr = result.stderr.trim();
    await sleep(300 * (attempt + 1));
  }
  const lazy = spawnSync(tools.umount, ['-l', mountPoint], { encoding: 'utf8' });
  if (lazy.status === 0 || !isMounted(mountPoint)) return undefined;
  return `umount ${mountPoint}: ${stderr}; umount -l: ${lazy.stderr.trim()}`;
}

/** Matching mount points, deepest first (subvolumes and netns files before the btrfs mount). */
function mountPoints(match: Matcher): string[] {
  const points = readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[1])
    .filter((p): p is string => p !== undefined)
    .map((p) => p.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))))
    .filter(match);
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

function isMounted(mountPoint: string): boolean {
  return mountPoints((p) => p === mountPoint).length > 0;
}

/** Loop devices whose backing file matches. */
function loopDevices(tools: Tools, match: Matcher): string[] {
  const result = spawnSync(tools.losetup, ['--list', '--json', '--output', 'NAME,BACK-FILE'], { encoding: 'utf8' });
  if (result.status !== 0 || result.stdout.trim() === '') return [];
  const { loopdevices } = JSON.parse(result.stdout) as { loopdevices: { name: string; 'back-file': string | null }[] };
  return loopdevices.filter((d) => d['back-file'] && match(d['back-file'])).map((d) => d.name);
}

// --- processes --------------------------------------------------------------

interface Proc {
  readonly pid: number;
  readonly ppid: number;
  readonly argv: readonly string[];
}

function processes(): Proc[] {
  const procs: Proc[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').filter((a) => a !== '');
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      procs.push({ pid: Number(name), ppid, argv });
    } catch {
      // exited meanwhile
    }
  }
  return procs;
}

/** dockerd, containerd and containerd shims whose command line matches (other programs never do). */
function daemonProcesses(match: Matcher): Proc[] {
  const isDaemon = (argv0: string) => ['dockerd', 'containerd'].includes(argv0) || argv0.startsWith('containerd-shim');
  return processes().filter(
    (p) => p.pid !== process.pid && isDaemon(basename(p.argv[0] ?? '')) && match(p.argv.join('\0')),
  );
}

/** `pids` and every process below them (container processes hang below their shim). */
function withDescendants(pids: readonly number[]): number[] {
  const all = processes();
  const found = new Set(pids);
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of all) {
      if (found.has(p.ppid) && !found.has(p.pid) && p.pid !== process.pid) {
        found.add(p.pid);
        grew = true;
      }
    }
  }
  return [...found];
}

/** SIGTERM, then SIGKILL for whatever is still alive after `graceMs`. */
async function terminate(pids: readonly number[], graceMs: number): Promise<void> {
  if (pids.length === 0) return;
  for (const pid of pids) signal(pid, 'SIGTERM');
  if (await waitGone(pids, graceMs)) return;
  for (const pid of pids) signal(pid, 'SIGKILL');
  await waitGone(pids, 5_000);
}

async function waitGone(pids: readonly number[], timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (pids.some(isAlive)) {
    if (Date.now() > deadline) return false;
    await sleep(100);
  }
  return true;
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

/** Alive and not a zombie (this host's init may never reap orphans). */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

// --- small helpers ----------------------------------------------------------

async function run(file: string, args: readonly string[]): Promise<string> {
  try {
    const { stdout } = await execFileAsync(file, args, { timeout: 120_000, maxBuffer: 16 << 20 });
    return stdout;
  } catch (err) {
    const e = err as Error & { stderr?: string };
    throw new Error(`${basename(file)} ${args.join(' ')} failed: ${e.stderr?.trim() || e.message}`);
  }
}

function logTail(file: string, lines = 30): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch (err) {
    return `(cannot read ${file}: ${(err as Error).message})`;
  }
}
