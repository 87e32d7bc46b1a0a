/**
 * Pre-started shells for the local backend: the next command's `bash` is
 * started ahead of it, in its own process group with its stdio pipes ready,
 * and waits for its script on one more pipe (fd 3), so a command does not
 * wait for fork, exec and bash's start-up. The docker exec agent does the
 * same (sandbox-image/agent/berth_agent/prestart.py).
 *
 * Node's stdio "pipes" are socket pairs, which `/dev/fd/3` cannot open, so
 * the shell reads its script with `read -N` (in chunks, up to EOF), closes
 * fd 3 and `eval`s it; `$0` is `bash` and `$#` is 0, as with `bash -c`. The
 * script ends in a fixed trailer: a shell whose pipe closed without the whole
 * script (let go, or the executor died mid-write) runs nothing and exits.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { statSync } from 'node:fs';
import type { Writable } from 'node:stream';
import { signalGroup, sleep } from './local-process-group.js';

/** Scripts up to this size (UTF-8 bytes) go to a pre-started shell; larger ones start bash as before. */
export const PRESTART_SCRIPT_BYTES = 60 * 1024;

/** Names in the child's environment that make bash run or print something before its script: no pre-start. */
const STARTUP_VARIABLES = ['BASH_ENV', 'ENV', 'SHELLOPTS', 'BASHOPTS'] as const;

/** Written after the script; only a script that arrived whole ends with it. */
const TRAILER = '\n#berth-prestart-end';
/** Written before the script, on its first line: the shell's variable holding it is gone before it runs. */
const PREAMBLE = '\\builtin unset __berth_ps; ';

/**
 * The pre-started shell's own program: builtins only. `|| :` because `read`
 * reports EOF before N characters as a failure. `read -N` counts characters,
 * so a UTF-8 script of `PRESTART_SCRIPT_BYTES` bytes fits in that many.
 */
const PROGRAM =
  `IFS= \\builtin read -r -N ${PRESTART_SCRIPT_BYTES + PREAMBLE.length + TRAILER.length} -u 3 __berth_ps || :; ` +
  // Plain `exec`: `builtin exec 3<&-` would close fd 3 for the builtin call only.
  `exec 3<&-; ` +
  `if [[ "\${__berth_ps%$'${TRAILER.replace('\n', '\\n')}'}" != "$__berth_ps" ]]; ` +
  `then \\builtin eval "\${__berth_ps%$'${TRAILER.replace('\n', '\\n')}'}"; else \\builtin exit 0; fi`;

/** Whether shells may be pre-started for children with environment `env` (see {@link STARTUP_VARIABLES}). */
export function prestartFits(env: Readonly<Record<string, string>>): boolean {
  return STARTUP_VARIABLES.every((name) => env[name] === undefined);
}

/** Whether `script` may go to a pre-started shell: not too large, and no NUL (which `bash -c` would refuse). */
export function scriptFits(script: string): boolean {
  return !script.includes('\0') && Buffer.byteLength(script, 'utf8') <= PRESTART_SCRIPT_BYTES;
}

/** Identifies a directory by device and inode: a directory removed and made again is another one. */
function directoryId(dir: string): string | undefined {
  const info = statSync(dir, { throwIfNoEntry: false });
  return info?.isDirectory() ? `${info.dev}:${info.ino}` : undefined;
}

/** One shell started ahead of its command, waiting on fd 3. */
export class PrestartedShell {
  readonly child: ChildProcess;
  /** The directory it was started in. */
  readonly cwd: string;
  readonly #dirId: string;
  #exited = false;
  readonly #exit: Promise<unknown>;

  private constructor(child: ChildProcess, cwd: string, dirId: string) {
    this.child = child;
    this.cwd = cwd;
    this.#dirId = dirId;
    this.#exit = once(child, 'exit').catch(() => undefined);
    child.once('exit', () => {
      this.#exited = true;
    });
    // EPIPE on fd 3 when the shell died before its script: `hand` reports it.
    this.#scriptPipe.on('error', () => undefined);
  }

  /** Starts a shell in `cwd` with environment `env`; undefined when it cannot (the next command starts bash itself). */
  static start(cwd: string, env: Readonly<Record<string, string>>): PrestartedShell | undefined {
    const dirId = directoryId(cwd);
    if (dirId === undefined) return undefined;
    let child: ChildProcess;
    try {
      child = spawn('bash', ['-c', PROGRAM, 'bash'], { cwd, env, detached: true, stdio: ['pipe', 'pipe', 'pipe', 'pipe'] });
    } catch {
      return undefined;
    }
    if (child.pid === undefined) {
      // The 'error' event says why; it is emitted asynchronously and must be consumed.
      child.once('error', () => undefined);
      return undefined;
    }
    child.on('error', () => undefined);
    return new PrestartedShell(child, cwd, dirId);
  }

  get #scriptPipe(): Writable {
    return this.child.stdio[3] as Writable;
  }

  /** Whether it can take a command that would start in `cwd`: still waiting, in that very directory. */
  fits(cwd: string): boolean {
    return !this.#exited && cwd === this.cwd && directoryId(cwd) === this.#dirId;
  }

  /**
   * Hands `script` over and closes fd 3: true once the script is in the
   * pipe (the shell runs it from now on); false when the shell was gone
   * already, and nothing ran.
   */
  hand(script: string): Promise<boolean> {
    const pipe = this.#scriptPipe;
    return new Promise<boolean>((resolve) => {
      pipe.write(`${PREAMBLE}${script}${TRAILER}`, (err) => {
        pipe.destroy();
        resolve(!err);
      });
    });
  }

  /** Ends the shell (it runs builtins only, so SIGKILL loses nothing) and resolves once it is gone. */
  async dispose(): Promise<void> {
    const pid = this.child.pid;
    if (!this.#exited && pid !== undefined) signalGroup(pid, 'SIGKILL');
    for (const stream of this.child.stdio) stream?.destroy();
    await Promise.race([this.#exit, sleep(2000)]);
  }
}
