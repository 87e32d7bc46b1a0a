import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { chmodSync, lstatSync, mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { SifCache } from '../../services/executor/backends/singularity/sif-cache.js';
import {
  buildSifArgv,
  envFlagValue,
  execArgv,
  instanceListArgv,
  instanceName,
  instancePrefix,
  instanceStartArgv,
  instanceStopArgv,
  needsConversion,
  parseInstanceList,
  resolveBinary,
  sifFileName,
} from '../../services/executor/backends/singularity/singularity-argv.js';
import { FILE_EXIT, groupCommand, readFileCommand, statCommand, writeFileCommand } from '../../services/executor/backends/shared/group-commands.js';
import { singularityOptionsFromConfig, singularityStateRoot } from '../../services/executor/backends/singularity/create-singularity-backend.js';
import { ConfigError } from '../../services/common/config.js';
import { parseConfig } from '../../services/common/config-load.js';

describe('singularity argv', () => {
  it('pins instance start: contained, no home, writable tmpfs, binds, env, limits, image, name', () => {
    assert.deepEqual(
      instanceStartArgv({
        image: '/cache/img.sif',
        name: 'berth-abc-1',
        binds: [
          { source: '/s/work', target: '/workspace' },
          { source: '/s/data', target: '/data', readOnly: true },
        ],
        env: { HOME: '/workspace', LIST: 'a,b' },
        memoryMiB: 5120,
        cpus: 1.5,
        pidsLimit: 300,
      }),
      [
        'instance', 'start', '--containall', '--no-home', '--writable-tmpfs',
        '--bind', '/s/work:/workspace', '--bind', '/s/data:/data:ro',
        '--env', 'HOME=/workspace', '--env', '"LIST=a,b"',
        '--memory', '5120M', '--cpus', '1.5', '--pids-limit', '300',
        '/cache/img.sif', 'berth-abc-1',
      ],
    );
    assert.deepEqual(
      instanceStartArgv({ image: 'i.sif', name: 'n', overlayDir: '/o/overlay', binds: [], env: {} }),
      ['instance', 'start', '--containall', '--no-home', '--overlay', '/o/overlay', 'i.sif', 'n'],
    );
    assert.throws(() => instanceStartArgv({ image: 'i', name: 'n', binds: [{ source: '/a:b', target: '/x' }], env: {} }), /cannot bind/);
    assert.throws(() => instanceStartArgv({ image: 'i', name: 'n', binds: [{ source: 'rel', target: '/x' }], env: {} }), /cannot bind/);
  });

  it('pins stop, list, build and exec', () => {
    assert.deepEqual(instanceStopArgv('n'), ['instance', 'stop', 'n']);
    assert.deepEqual(instanceListArgv(), ['instance', 'list', '--json']);
    assert.deepEqual(buildSifArgv('/c/x.sif.tmp', 'docker://img:1'), ['build', '--force', '/c/x.sif.tmp', 'docker://img:1']);
    assert.deepEqual(execArgv({ name: 'n', env: { A: '1' }, pwd: '/workspace', command: ['bash', '-c', 'true'] }), [
      'exec', '--cleanenv', '--env', 'A=1', '--pwd', '/workspace', 'instance://n', 'bash', '-c', 'true',
    ]);
  });

  it('quotes --env values the CLI would split, and refuses what it cannot pass', () => {
    assert.equal(envFlagValue('A', 'plain value'), 'A=plain value');
    assert.equal(envFlagValue('A', 'x,y'), '"A=x,y"');
    assert.equal(envFlagValue('A', 'say "hi"'), '"A=say ""hi"""');
    assert.throws(() => envFlagValue('1A', 'x'), /invalid environment variable name/);
    assert.throws(() => envFlagValue('A', 'two\nlines'), /newline/);
  });

  it('names instances per state root and task', () => {
    const prefix = instancePrefix('/var/lib/berth/singularity');
    assert.match(prefix, /^berth-[0-9a-f]{6}-$/);
    assert.notEqual(prefix, instancePrefix('/other'));
    const name = instanceName(prefix, { tenant: 't', taskId: '../$(x)' });
    assert.match(name, /^berth-[0-9a-f]{6}-[0-9a-f]{16}$/);
    assert.notEqual(name, instanceName(prefix, { tenant: 'u', taskId: '../$(x)' }));
  });

  it('converts registry references once into a named SIF, uses SIF paths as given', () => {
    assert.ok(needsConversion('docker://debian:bookworm'));
    assert.ok(needsConversion('docker-daemon://berth-sandbox:latest'));
    assert.ok(!needsConversion('/images/x.sif'));
    assert.match(sifFileName('docker://berth-sandbox:latest'), /^berth-sandbox_latest-[0-9a-f]{12}\.sif$/);
    assert.notEqual(sifFileName('docker://a:1'), sifFileName('docker-daemon://a:1'));
  });

  it('parses instance list output', () => {
    assert.deepEqual(parseInstanceList(''), []);
    assert.deepEqual(parseInstanceList('{"instances": null}'), []);
    assert.deepEqual(parseInstanceList('{"instances":[{"instance":"a","pid":12,"img":"/x.sif","ip":""}]}'), [
      { name: 'a', pid: 12, image: '/x.sif' },
    ]);
  });

  it('finds apptainer before singularity on PATH, and a configured binary first', () => {
    const present = new Set(['/b/singularity', '/c/apptainer']);
    assert.equal(resolveBinary('', '/a:/b:/c', (f) => present.has(f)), '/c/apptainer');
    assert.equal(resolveBinary('', '/a:/b', (f) => present.has(f)), '/b/singularity');
    assert.equal(resolveBinary('', '/a', (f) => present.has(f)), undefined);
    assert.equal(resolveBinary('/opt/apptainer/bin/apptainer', '', () => false), '/opt/apptainer/bin/apptainer');
  });

  it('pins the group command', () => {
    const argv = groupCommand('echo hi', 'n0');
    assert.deepEqual(argv.slice(0, 4), ['bash', '-c', 'exec 3>&2; exec setsid -w bash -c "$1" berth-exec "$2" 2>/dev/null', 'berth']);
    assert.equal(argv[4], `exec 2>&3 3>&-\nprintf '%s%s\\n' '__berth_pgid_n0_' "$$"\ntrap : TERM INT HUP\nbash -c "$1"\nexit $?`);
    assert.equal(argv[5], 'echo hi');
    assert.match(groupCommand('x', 'n', true)[4] ?? '', /SHELL=\/bin\/bash script -qefc "bash -c \$\(printf '%q' "\$1"\)" \/dev\/null/);
  });

  it('the group command runs in its own process group and reports exit codes like bash', () => {
    const run = (script: string, stdin = '') => spawnSync(groupCommand(script, 'n')[0] ?? 'bash', groupCommand(script, 'n').slice(1), { input: stdin, encoding: 'utf8' });
    const r = run('echo "pgid=$(ps -o pgid= $$ | tr -d " ")"; cat; echo err >&2; exit 3', 'in\n');
    assert.equal(r.status, 3);
    const [first, second, third] = r.stdout.split('\n');
    assert.equal(second, `pgid=${first?.replace('__berth_pgid_n_', '')}`);
    assert.equal(third, 'in');
    assert.equal(r.stderr, 'err\n');
    assert.equal(run('kill -9 $$').status, 137);
  });

  it('file helpers map failures to exit codes', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-sing-files-'));
    try {
      const sh = (argv: string[], input?: string) => spawnSync(argv[0] ?? 'bash', argv.slice(1), { input, encoding: 'utf8' });
      assert.equal(sh(writeFileCommand(`${dir}/a b/c.txt`), 'data').status, 0);
      assert.equal(sh(readFileCommand(`${dir}/a b/c.txt`, 100)).stdout, 'data');
      assert.equal(sh(readFileCommand(`${dir}/missing`, 100)).status, 44);
      assert.equal(sh(readFileCommand(dir, 100)).status, 45);
      // Devices and FIFOs are refused before a byte is read (a FIFO without a writer would block cat forever).
      const zero = sh(readFileCommand('/dev/zero', 100));
      assert.deepEqual([zero.status, zero.stdout, zero.stderr], [48, '', 'character special file\n']);
      spawnSync('mkfifo', [`${dir}/fifo`]);
      assert.deepEqual([sh(readFileCommand(`${dir}/fifo`, 100)).status, sh(readFileCommand(`${dir}/fifo`, 100)).stderr], [48, 'fifo\n']);
      assert.equal(sh(writeFileCommand(`${dir}/fifo`), 'x').status, 48);
      assert.deepEqual([sh(readFileCommand(`${dir}/a b/c.txt`, 3)).status, sh(readFileCommand(`${dir}/a b/c.txt`, 3)).stderr], [49, '4\n']);
      assert.equal(sh(writeFileCommand(`${dir}/a b/c.txt/under-a-file`), 'x').status, 46);
      assert.equal(sh(statCommand(`${dir}/a b/c.txt`)).stdout, 'file 4\n');
      assert.match(sh(statCommand(dir)).stdout, /^dir \d+\n$/);
      assert.equal(sh(statCommand(`${dir}/missing`)).stdout, 'missing\n');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('the atomic write helper (singularity, docker exec)', () => {
  it('replaces the file through a temp file: mode kept, new inode, symlinks written through, nothing left behind', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-write-script-'));
    const sh = (argv: string[], input?: string) => spawnSync(argv[0] ?? 'bash', argv.slice(1), { input, encoding: 'utf8' });
    const temps = () => readdirSync(dir).filter((n) => n.includes('.berth-'));
    try {
      const file = path.join(dir, 'f.txt');
      writeFileSync(file, 'old\n');
      chmodSync(file, 0o754);
      symlinkSync('f.txt', path.join(dir, 'link'));
      const inode = statSync(file).ino;
      assert.equal(sh(writeFileCommand(file), 'new\n').status, 0);
      assert.equal(readFileSync(file, 'utf8'), 'new\n');
      assert.equal(statSync(file).mode & 0o7777, 0o754);
      assert.notEqual(statSync(file).ino, inode);
      assert.equal(sh(writeFileCommand(path.join(dir, 'link')), 'via link\n').status, 0);
      assert.ok(lstatSync(path.join(dir, 'link')).isSymbolicLink());
      assert.equal(readFileSync(file, 'utf8'), 'via link\n');
      // A dangling link: made where it points. A new file: 0666 less the umask, as `cat >` made it.
      symlinkSync(path.join(dir, 'made.txt'), path.join(dir, 'dangling'));
      const made = sh(['bash', '-c', 'umask 027; exec "$@"', 'x', ...writeFileCommand(path.join(dir, 'dangling'))], 'made\n');
      assert.equal(made.status, 0, made.stderr);
      assert.equal(readFileSync(path.join(dir, 'made.txt'), 'utf8'), 'made\n');
      assert.equal(statSync(path.join(dir, 'made.txt')).mode & 0o7777, 0o640);
      // A name near NAME_MAX still gets a temp file of a legal name.
      const long = path.join(dir, 'n'.repeat(250));
      assert.equal(sh(writeFileCommand(long), 'long\n').status, 0);
      assert.equal(readFileSync(long, 'utf8'), 'long\n');
      assert.deepEqual(temps(), []);

      // No temp file can be made beside it (as root: an immutable directory): refused, old content kept, no temp.
      mkdirSync(path.join(dir, 'locked'));
      writeFileSync(path.join(dir, 'locked', 'g.txt'), 'kept\n');
      const root = process.getuid?.() === 0;
      const lock = sh(['bash', '-c', root ? 'chattr +i "$1"' : 'chmod 555 "$1"', 'x', path.join(dir, 'locked')]);
      assert.equal(lock.status, 0, lock.stderr);
      try {
        assert.equal(sh(writeFileCommand(path.join(dir, 'locked', 'g.txt')), 'new\n').status, FILE_EXIT.denied);
        assert.equal(readFileSync(path.join(dir, 'locked', 'g.txt'), 'utf8'), 'kept\n');
        assert.deepEqual(readdirSync(path.join(dir, 'locked')), ['g.txt']);
      } finally {
        sh(['bash', '-c', root ? 'chattr -i "$1"' : 'chmod 755 "$1"', 'x', path.join(dir, 'locked')]);
      }
      // A failing input (stdin is a directory: cat's read fails): the temp file goes, the file stays.
      const cut = spawnSync('bash', ['-c', 'exec "$@" < /', 'x', ...writeFileCommand(file)], { encoding: 'utf8' });
      assert.notEqual(cut.status, 0);
      assert.equal(readFileSync(file, 'utf8'), 'via link\n');
      assert.deepEqual(temps(), []);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('singularity config', () => {
  it('needs an image, and maps the container settings', () => {
    assert.throws(() => parseConfig({ terminal: { backend: 'singularity' } }), (e: unknown) => e instanceof ConfigError && /singularity_image/.test(e.message));
    const config = parseConfig({
      terminal: { backend: 'singularity', singularity_image: 'docker://x', container_memory: 2048, container_cpu: 2, container_pids: 99, env_passthrough: 'A_KEY' },
      executor: { state_root: '/srv/berth' },
    });
    const o = singularityOptionsFromConfig(config);
    assert.deepEqual([o.image, o.memoryMiB, o.cpus, o.pidsLimit, o.persistent, o.stateRoot, o.envPassthrough, o.binary], [
      'docker://x', 2048, 2, 99, true, '/srv/berth/singularity', ['A_KEY'], undefined,
    ]);
    assert.equal(singularityOptionsFromConfig(parseConfig({ terminal: { backend: 'singularity', singularity_image: 'x.sif', singularity_binary: '/opt/sing' } })).binary, '/opt/sing');
    assert.match(singularityStateRoot(''), /berth-\d+\/singularity$/);
  });
});

describe('SifCache', () => {
  it('converts an image once, however many tasks and executors ask at the same time', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-sif-cache-'));
    try {
      let conversions = 0;
      const convert = async (output: string) => {
        conversions += 1;
        await new Promise((r) => setTimeout(r, 300));
        await writeFile(output, 'sif');
      };
      const a = new SifCache(dir, convert);
      const b = new SifCache(dir, convert); // a second executor on the same host
      const paths = await Promise.all([a.get('docker://x'), a.get('docker://x'), b.get('docker://x'), b.get('docker://x')]);
      assert.equal(conversions, 1);
      assert.equal(new Set(paths).size, 1);
      assert.deepEqual(await readdir(dir), [path.basename(paths[0] ?? '')]);
      assert.equal(await new SifCache(dir, convert).get('docker://x'), paths[0]);
      assert.equal(conversions, 1);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('breaks a lock whose holder died, and retries after a failed conversion', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-sif-cache-'));
    try {
      await writeFile(path.join(dir, `${sifFileName('docker://y')}.lock`), '999999999');
      let attempts = 0;
      const cache = new SifCache(dir, async (output) => {
        attempts += 1;
        if (attempts === 1) throw new Error('network down');
        await writeFile(output, 'sif');
      });
      await assert.rejects(cache.get('docker://y'), /network down/);
      assert.match(await cache.get('docker://y'), /\.sif$/);
      assert.equal(attempts, 2);
      assert.deepEqual((await readdir(dir)).length, 1, 'no temp files or locks left');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
