/**
 * Per-user kernel limits are a task's own (docker backend): each task's
 * commands run under a uid of their own from `docker.task_uids`, so tenant
 * B using up what the kernel gives one user (inotify instances, inotify
 * watches, processes under RLIMIT_NPROC) leaves tenant A, and the host's
 * uid 1000, untouched. B proves it reached each limit (the failing call's
 * errno, read back with `read_file`, which starts no process); A, and a
 * process this test starts as uid 1000 on the host, then do what B can no
 * longer do. With one uid for every sandbox, as before, each of A's
 * attempts failed.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerUnavailableReason, removeLabelled, taskNamesIn } from '../support/docker-fixtures.js';
import { startTwoTenants, TENANT_A, TENANT_B, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);

/** RLIMIT_NPROC of every container here (an operator's `--ulimit`); the pids limit (256) is far above it. */
const NPROC = 64;
const EMFILE = 24;
const ENOSPC = 28;
const EAGAIN = 11;

/** Python that exhausts one per-user limit, prints `exhausted COUNT ERRNO` and keeps what it holds. */
const EXHAUST: Record<'instances' | 'watches' | 'processes', string> = {
  instances: [
    'import ctypes, time',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'fds = []',
    'while libc.inotify_init1(0) >= 0: fds.append(1)',
    'print("exhausted %d %d" % (len(fds), ctypes.get_errno()), flush=True)',
    'time.sleep(3600)',
  ].join('\n'),
  watches: [
    'import ctypes, os, time',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'limit = int(open("/proc/sys/fs/inotify/max_user_watches").read())',
    'fd = libc.inotify_init1(0)',
    'os.mkdir("/tmp/w")',
    'n, err = 0, 0',
    'for i in range(limit + 16):',
    '    p = "/tmp/w/%d" % i',
    '    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))',
    '    if libc.inotify_add_watch(fd, p.encode(), 2) < 0:',
    '        err = ctypes.get_errno()',
    '        break',
    '    n += 1',
    'print("exhausted %d %d" % (n, err), flush=True)',
    'time.sleep(3600)',
  ].join('\n'),
  processes: [
    'import os, time',
    'n, err = 0, 0',
    'while True:',
    '    try:',
    '        pid = os.fork()',
    '    except OSError as e:',
    '        err = e.errno',
    '        break',
    '    if pid == 0:',
    '        time.sleep(3600)',
    '        os._exit(0)',
    '    n += 1',
    'print("exhausted %d %d" % (n, err), flush=True)',
    'time.sleep(3600)',
  ].join('\n'),
};

/**
 * What A (or the host's uid 1000) does that B no longer can: one inotify
 * instance with a watch, and some processes (under RLIMIT_NPROC NPROC when
 * the environment says so, as in the containers).
 */
const PROBE = [
  'import ctypes, os, resource',
  'if os.environ.get("NPROC"): resource.setrlimit(resource.RLIMIT_NPROC, (int(os.environ["NPROC"]),) * 2)',
  'libc = ctypes.CDLL(None, use_errno=True)',
  'fd = libc.inotify_init1(0)',
  'w = libc.inotify_add_watch(fd, b"/tmp", 2) if fd >= 0 else -1',
  'kids = []',
  'try:',
  '    for _ in range(8):',
  '        pid = os.fork()',
  '        if pid == 0:',
  '            os._exit(0)',
  '        kids.append(pid)',
  'except OSError:',
  '    pass',
  'for pid in kids:',
  '    os.waitpid(pid, 0)',
  'print("inotify=%s watch=%s forked=%d" % (fd >= 0, w >= 0, len(kids)))',
].join('\n');

/** PROBE as `uid` on the host, outside any container; `nproc`: under that RLIMIT_NPROC. */
function hostProbe(uid: number, nproc?: number): string {
  const env = { ...process.env, NPROC: nproc === undefined ? '' : String(nproc) };
  const r = spawnSync('python3', ['-c', PROBE], { uid, gid: uid, encoding: 'utf8', cwd: '/', env });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

describe("tenant B using up per-user kernel limits leaves tenant A untouched (docker backend)", { skip: unavailable, timeout: 600_000 }, () => {
  let t: TwoTenants;
  const run = randomBytes(4).toString('hex');
  const aTask = `iso-uid-a-${run}`;
  const bTasks = { instances: `iso-uid-bi-${run}`, watches: `iso-uid-bw-${run}`, processes: `iso-uid-bp-${run}` };
  const json = (text: string) => JSON.parse(text) as Record<string, unknown>;
  const terminal = async (client: 'a' | 'b', command: string, task: string) =>
    json(await t.call(client === 'a' ? t.a : t.b, 'terminal', { command, timeout: 120 }, task));

  before(async () => {
    t = await startTwoTenants({
      backend: 'docker',
      env: { TERMINAL_DOCKER_EXTRA_ARGS: JSON.stringify([`--ulimit=nproc=${NPROC}:${NPROC}`]) },
    });
  });
  after(async () => {
    await t?.stop();
    for (const id of [aTask, ...Object.values(bTasks)]) await removeLabelled(docker, LABEL.task, id);
  });

  /** Starts B's exhausting script in the background and waits until it says how far it got. */
  async function exhaust(kind: keyof typeof EXHAUST): Promise<{ count: number; errno: number }> {
    const task = bTasks[kind];
    const bg = json(await t.call(t.b, 'terminal', { command: `python3 -c '${EXHAUST[kind]}'`, background: true }, task));
    assert.match(String(bg.session_id), /^proc_/, JSON.stringify(bg));
    // process_manage starts no process in the sandbox: it answers even where B can start none.
    let seen = '';
    for (let i = 0; i < 600 && !/exhausted \d+ \d+/.test(seen); i++) {
      if (i > 0) await sleep(200);
      seen = JSON.stringify(json(await t.call(t.b, 'process_manage', { action: 'poll', session_id: bg.session_id }, task)));
    }
    const m = /exhausted (\d+) (\d+)/.exec(seen);
    assert.ok(m, `B's ${kind} script did not say how far it got: ${seen}`);
    return { count: Number(m[1]), errno: Number(m[2]) };
  }

  const uidOf = async (client: 'a' | 'b', task: string) => Number(String((await terminal(client, 'id -u', task)).output).trim());

  test('every task has a uid of its own, none of them a host account; whoami, $HOME, ~ and pwd answer as before', async () => {
    const probe = 'id -un; echo "$HOME" ~; python3 -c "import os, pwd; e = pwd.getpwuid(os.getuid()); print(e.pw_name, e.pw_dir)"; python3 -m site --user-site';
    const a = await terminal('a', probe, aTask);
    assert.equal(a.exit_code, 0, JSON.stringify(a));
    assert.equal(a.output, 'sandbox\n/home/sandbox /home/sandbox\nsandbox /home/sandbox\n/home/sandbox/.local/lib/python3.11/site-packages');
    const uids = [await uidOf('a', aTask), ...(await Promise.all(Object.values(bTasks).map((task) => uidOf('b', task))))];
    assert.equal(new Set(uids).size, uids.length, `uids ${uids.join(', ')}`);
    const hostIds = new Set(readFileSync('/etc/passwd', 'utf8').split('\n').map((line) => Number(line.split(':')[2])));
    for (const uid of uids) {
      assert.ok(uid >= 1_900_000_000 && uid <= 1_916_777_215, `uid ${uid} is one of docker.task_uids`);
      assert.ok(!hostIds.has(uid), `uid ${uid} is no host account`);
    }
    const info = await docker.getContainer((await taskNamesIn(t.serve.stateRoot)).container({ tenant: TENANT_A, taskId: aTask })).inspect();
    assert.equal(info.Config.Labels[LABEL.uid], String(uids[0]));
  });

  test('B holding every inotify instance its user may have: A and the host\'s uid 1000 still get theirs', async () => {
    const b = await exhaust('instances');
    assert.equal(b.errno, EMFILE, `B stopped at ${b.count} instances with errno ${b.errno}`);
    // Control: anyone with B's uid is refused too, so sharing it (as every sandbox and uid 1000 did) is what A escapes.
    assert.equal(hostProbe(await uidOf('b', bTasks.instances)), 'inotify=False watch=False forked=8');
    await assertOthersUntouched();
  });

  test('B holding every inotify watch its user may have: A and the host\'s uid 1000 still add theirs', async () => {
    const b = await exhaust('watches');
    assert.equal(b.errno, ENOSPC, `B stopped at ${b.count} watches with errno ${b.errno}`);
    assert.equal(hostProbe(await uidOf('b', bTasks.watches)), 'inotify=True watch=False forked=8');
    await assertOthersUntouched();
  });

  test(`B holding every process its user may have (RLIMIT_NPROC ${NPROC}): A and the host's uid 1000 still fork`, async () => {
    const b = await exhaust('processes');
    assert.equal(b.errno, EAGAIN, `B stopped at ${b.count} processes with errno ${b.errno}`);
    assert.ok(b.count < NPROC, `B forked ${b.count}: the limit counted its processes`);
    // B's uid is read from the container label: B's own task can start no process to say it.
    const info = await docker.getContainer((await taskNamesIn(t.serve.stateRoot)).container({ tenant: TENANT_B, taskId: bTasks.processes })).inspect();
    assert.equal(hostProbe(Number(info.Config.Labels[LABEL.uid]), NPROC), 'inotify=True watch=True forked=0');
    await assertOthersUntouched();
  });

  async function assertOthersUntouched(): Promise<void> {
    const a = await terminal('a', `python3 -c '${PROBE}'`, aTask);
    assert.equal(a.exit_code, 0, JSON.stringify(a));
    assert.equal(String(a.output).trim(), 'inotify=True watch=True forked=8');
    // The host's uid 1000 was every sandbox's uid before: its inotify limits are untouched too (it keeps
    // the host's RLIMIT_NPROC: the host user's own processes count there, whatever B does).
    assert.equal(hostProbe(1000), 'inotify=True watch=True forked=8');
  }
});
