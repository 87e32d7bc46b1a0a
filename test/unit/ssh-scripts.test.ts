import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { PgidLineFilter } from '../../services/executor/backends/shared/pgid-line-filter.js';
import {
  backgroundPaths,
  bashCommand,
  buildBackgroundStartCommand,
  buildExecCommand,
  buildKillCommand,
  buildPreflightCommand,
  buildRemoveCommand,
  buildStdinCloseCommand,
  buildStdinWriteCommand,
  exportLines,
  parseExitFile,
  pgidLinePrefix,
  taskDirName,
} from '../../services/executor/backends/ssh/ssh-scripts.js';

/** Runs a command line the way sshd does: the login shell's `-c`. */
function asLoginShell(command: string, stdin = '') {
  const r = spawnSync('sh', ['-c', command], { input: stdin, encoding: 'utf8', timeout: 10_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('ssh command lines', () => {
  it('names task directories by a hash of tenant and task', () => {
    assert.equal(taskDirName({ tenant: 't', taskId: 'x' }), taskDirName({ tenant: 't', taskId: 'x' }));
    assert.notEqual(taskDirName({ tenant: 't', taskId: 'x' }), taskDirName({ tenant: 'u', taskId: 'x' }));
    assert.match(taskDirName({ tenant: '../..', taskId: '$(rm -rf /)' }), /^[0-9a-f]{32}$/);
  });

  it('hands the login shell over to bash with every argument quoted', () => {
    assert.equal(bashCommand('echo "$1"', "it's"), `exec bash -c 'echo "$1"' berth 'it'\\''s'`);
  });

  it('exports only valid variable names', () => {
    assert.deepEqual(exportLines({ A_1: "x'y" }), [`export A_1='x'\\''y'`]);
    assert.throws(() => exportLines({ 'A-B': 'x' }), /invalid environment variable name/);
    assert.throws(() => exportLines({ 'A;rm': 'x' }), /invalid environment variable name/);
  });

  it('pins the foreground command: setsid, group id line first, stderr through fd 3', () => {
    const command = buildExecCommand({ script: "echo 'hi'", cwd: '/home/u/w d', nonce: 'n1', env: { A: 'v' } });
    assert.equal(
      command,
      "cd -- '/home/u/w d' 2>/dev/null || cd; exec 3>&2; exec setsid -w bash -c 'exec 2>&3 3>&-\n" +
        "printf '\\''%s%s\\n'\\'' '\\''__berth_pgid_n1_'\\'' \"$$\"\n" +
        "export A='\\''v'\\''\n" +
        'trap : TERM INT HUP\n' +
        'bash -c "$1"\n' +
        "exit $?' berth-exec 'echo '\\''hi'\\''' 2>/dev/null",
    );
  });

  it('the foreground command runs in a new process group and keeps exit codes, stdin and stderr', () => {
    const r = asLoginShell(
      buildExecCommand({ script: 'echo "pgid=$(ps -o pgid= $$ | tr -d " ") A=$A"; cat; echo err >&2; exit 3', cwd: '/', nonce: 'n', env: { A: 'v' } }),
      'from stdin\n',
    );
    assert.equal(r.status, 3);
    const [first, second, third] = r.stdout.split('\n');
    const pgid = first?.slice(pgidLinePrefix('n').length);
    assert.match(first ?? '', /^__berth_pgid_n_\d+$/);
    assert.equal(second, `pgid=${pgid} A=v`);
    assert.notEqual(Number(pgid), process.pid);
    assert.equal(third, 'from stdin');
    assert.equal(r.stderr, 'err\n');
    assert.equal(asLoginShell(buildExecCommand({ script: 'kill -9 $$', cwd: '/', nonce: 'n' })).status, 137);
  });

  it('pins the kill command: TERM, grace in 50 ms steps, KILL', () => {
    assert.equal(
      buildKillCommand(1234, 120),
      "exec bash -c 'p=$1\n" +
        'kill -TERM -- -$p 2>/dev/null || exit 0\n' +
        'for ((i = 0; i < 3; i++)); do sleep 0.05; kill -0 -- -$p 2>/dev/null || exit 0; done\n' +
        'kill -KILL -- -$p 2>/dev/null\n' +
        'for ((i = 0; i < 40; i++)); do kill -0 -- -$p 2>/dev/null || break; sleep 0.01; done\n' +
        `if [ -n "$2" ] && [ ! -e "$2" ]; then printf '\\''137\\n'\\'' > "$2"; fi\n` +
        "exit 0' berth '1234' ''",
    );
    assert.match(buildKillCommand(1234, 50, '/x/exit'), / berth '1234' '\/x\/exit'$/);
    assert.throws(() => buildKillCommand(1, 100), /refusing/);
    assert.throws(() => buildKillCommand(0, 100), /refusing/);
    assert.throws(() => buildKillCommand(-5, 100), /refusing/);
  });

  it('the kill command ends a whole process group, even a member that ignores SIGTERM', async () => {
    const group = spawn('bash', ['-c', 'trap "" TERM; sleep 60 & sleep 60'], { detached: true, stdio: 'ignore' });
    const pgid = group.pid ?? 0;
    const exited = new Promise((resolve) => group.once('exit', resolve));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const r = spawnSync('sh', ['-c', buildKillCommand(pgid, 100)], { encoding: 'utf8', timeout: 10_000 });
    assert.equal(r.status, 0, r.stderr);
    await exited;
    // Orphans may linger as zombies until someone reaps them; a zombie runs nothing.
    const states = spawnSync('ps', ['-o', 'stat=', '-g', String(pgid)], { encoding: 'utf8' }).stdout.trim();
    assert.ok(states.split('\n').every((s) => s === '' || s.startsWith('Z')), states);
  });

  it('pins the preflight: POSIX sh checks, fresh private task directories, home reported', () => {
    assert.equal(
      buildPreflightCommand('.berth/tasks', 'abc'),
      [
        "if ! command -v bash >/dev/null 2>&1; then echo 'berth: bash is not installed on the host'; exit 90; fi",
        "if ! command -v setsid >/dev/null 2>&1; then echo 'berth: setsid (util-linux) is not installed on the host'; exit 91; fi",
        'umask 077',
        `d="$HOME"/'.berth/tasks/abc'`,
        'rm -rf -- "$d" && mkdir -p -- "$d/work" "$d/state" "$d/bg" || { echo "berth: cannot create $d"; exit 92; }',
        `chmod 700 -- "$HOME"/'.berth' 2>/dev/null`,
        `printf 'berth-home:%s\\n' "$HOME"`,
      ].join('\n'),
    );
  });

  it('pins the helper commands', () => {
    const paths = backgroundPaths('/h/bg/1');
    assert.deepEqual(paths, {
      dir: '/h/bg/1',
      log: '/h/bg/1/log',
      exit: '/h/bg/1/exit',
      pid: '/h/bg/1/pid',
      stdin: '/h/bg/1/stdin',
      holder: '/h/bg/1/holder',
    });
    assert.equal(buildStdinWriteCommand(paths), `exec bash -c 'exec timeout 10 cat >> "$1"' berth '/h/bg/1/stdin'`);
    assert.equal(
      buildStdinCloseCommand(paths),
      `exec bash -c 'h=$(cat -- "$1" 2>/dev/null) && kill "$h" 2>/dev/null; exit 0' berth '/h/bg/1/holder'`,
    );
    assert.equal(buildRemoveCommand('/h/t x'), `exec bash -c 'rm -rf -- "$1"' berth '/h/t x'`);
    const start = buildBackgroundStartCommand({ paths, script: 'echo hi', cwd: '/w', env: { B: '1' } });
    assert.match(start, /^exec bash -c '.*nohup setsid bash -c "\$3" berth-bg "\$4" "\$d"/s);
    assert.ok(start.includes(` berth '/h/bg/1' '/w' 'd=$2`), start);
    assert.ok(start.endsWith(` 'echo hi'`), start);
    assert.match(start, /export B='\\''1'\\''/);
    assert.doesNotMatch(start, /script -qefc/);
    assert.match(buildBackgroundStartCommand({ paths, script: 'x', cwd: '/w', pty: true }), /script -qefc/);
  });

  it('parses exit files', () => {
    assert.equal(parseExitFile('0\n'), 0);
    assert.equal(parseExitFile('143\n'), 143);
    assert.equal(parseExitFile(''), undefined);
    assert.equal(parseExitFile('1'), 1);
    assert.equal(parseExitFile('x\n'), undefined);
  });
});

describe('PgidLineFilter', () => {
  it('finds the group id line across chunks, drops login noise before it and forwards the rest', () => {
    const filter = new PgidLineFilter('__berth_pgid_abc_');
    const seen: number[] = [];
    const out: Buffer[] = [];
    for (const part of ['motd noise\n__berth_pg', 'id_abc_12', '34\r', '\nhello ', 'world\n']) {
      out.push(filter.push(Buffer.from(part), (pgid) => seen.push(pgid)));
    }
    assert.deepEqual(seen, [1234]);
    assert.equal(filter.pgid, 1234);
    assert.equal(Buffer.concat(out).toString(), 'hello world\n');
  });

  it('forwards nothing until the line arrives', () => {
    const filter = new PgidLineFilter('__p_');
    assert.equal(filter.push(Buffer.from('output before'), () => undefined).length, 0);
    assert.equal(filter.pgid, undefined);
  });
});
