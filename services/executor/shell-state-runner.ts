/**
 * The shared shell-state runner (spec §3). Every command runs in a fresh
 * `bash -c`, yet cwd, exported variables, functions and aliases persist per
 * task, over any backend that can run `bash -c`:
 *
 * 1. Once per environment a login shell (`bash -l`) writes a snapshot
 *    (`export -p`, `declare -f`, `alias -p`, `shopt -s expand_aliases`) to a
 *    file in `env.stateDir`.
 * 2. Each command's script sources the current snapshot, `cd`s to the saved
 *    cwd (exit 126 with a message when it is gone), evals the command with
 *    stderr merged into stdout, saves the state to a new snapshot file of its
 *    own (also from an EXIT trap, so `exit N` saves too) and prints a marker
 *    line carrying a per-environment random nonce, whether the save
 *    succeeded, and the cwd.
 * 3. The runner strips the marker from the output, also when it arrives split
 *    across chunks, records the cwd and makes the new file the current
 *    snapshot. Superseded files are removed in batches by a later command's
 *    script (one `rm` per {@link SNAPSHOT_CLEANUP_BATCH} commands), once
 *    nothing can still read them.
 *
 * Only bash builtins run on a command's path: no `mv` or `rm` per call. A
 * fork and exec of one costs as much as the `bash -c` itself (measured in
 * the sandbox image: about twice the time of the whole call), and giving each
 * command its own file is what makes the rename unnecessary: nobody reads a
 * file while it is written, so it is never seen torn.
 *
 * Concurrency: calls may overlap (each is its own bash). Each starts from the
 * cwd and snapshot current when it starts; whichever finishes last decides
 * the cwd and the snapshot (last writer wins).
 */
import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import { UnavailableError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import { shellQuote } from '../common/shell/quote.js';
import type { BackendEnvironment, BackgroundHandle, ExecResult } from './backend.js';
import { partialPrefixLength } from './output.js';

/**
 * Parts of environment variable names that mark provider secrets, matched
 * case-insensitively anywhere in the name. Backends drop such variables from
 * children's environments unless an operator passes them through, and the
 * bootstrap drops any that a login profile (say `~/.profile` exporting an API
 * key) adds, so the snapshot never smuggles one in.
 */
export const PROVIDER_SECRET_NAME_PARTS: readonly string[] = [
  'KEY',
  'TOKEN',
  'SECRET',
  'PASSWORD',
  'CREDENTIAL',
  'PASSWD',
  'AUTH',
  'DSN',
  'WEBHOOK',
  'CREDS',
  'BEARER',
  'APIKEY',
];

/**
 * Settings of the service's own providers that do not look secret by name but
 * are not the sandbox's business either (the web tools' endpoints: an
 * internal search server's address is topology a sandbox should not learn).
 */
export const SERVICE_ENV_NAMES: ReadonlySet<string> = new Set([
  'SEARXNG_URL',
  'SEARXNG_TIMEOUT',
  'TAVILY_API_URL',
  'TAVILY_BASE_URL',
]);

/**
 * True when `name` looks like it holds a provider secret (see
 * {@link PROVIDER_SECRET_NAME_PARTS}) or is one of {@link SERVICE_ENV_NAMES}.
 */
export function isProviderSecretName(name: string): boolean {
  const upper = name.toUpperCase();
  return SERVICE_ENV_NAMES.has(upper) || PROVIDER_SECRET_NAME_PARTS.some((part) => upper.includes(part));
}

/** The two halves of the cwd marker line for one environment. */
export interface CwdMarker {
  readonly start: string;
  readonly end: string;
}

/** Marker strings for `nonce`: unguessable, so command output cannot forge a cwd. */
export function cwdMarker(nonce: string): CwdMarker {
  return { start: `__berth_cwd_begin_${nonce}__`, end: `__berth_cwd_end_${nonce}__` };
}

const LF = 0x0a;
const CR = 0x0d;
/** A marker whose end has not appeared within this many bytes is not ours (paths are ≤ 4096 bytes). */
const MAX_MARKER_BODY_BYTES = 16 * 1024;

/**
 * Streaming filter that removes cwd marker lines from output and remembers
 * the last one seen. A marker is `\n`, start, `+` (state saved) or `-` (the
 * save failed), the cwd as `pwd` prints it (newline included), optionally the
 * directory the command started in, resolved (`pwd -P`) and followed by a
 * newline, then end, `\n`; `\r\n` is accepted too, for PTYs. Only bytes that
 * could begin a marker are held back, so live output keeps flowing.
 */
export class CwdMarkerFilter {
  readonly #start: Buffer;
  readonly #end: Buffer;
  readonly #prefixes: readonly Buffer[];
  #pending: Buffer = Buffer.alloc(0);
  #cwd: string | undefined;
  #startCwd: string | undefined;
  #saved: boolean | undefined;

  constructor(marker: CwdMarker) {
    this.#start = Buffer.from(marker.start);
    this.#end = Buffer.from(marker.end);
    this.#prefixes = [Buffer.concat([Buffer.from('\r\n'), this.#start]), Buffer.concat([Buffer.from('\n'), this.#start])];
  }

  /** The cwd carried by the last complete marker, if any. */
  get cwd(): string | undefined {
    return this.#cwd;
  }

  /** The resolved start directory carried by the marker that gave {@link cwd}, if it had one. */
  get startCwd(): string | undefined {
    return this.#startCwd;
  }

  /** Whether the last complete marker said the state was saved; undefined when none arrived. */
  get saved(): boolean | undefined {
    return this.#saved;
  }

  /** Feeds a chunk; returns the bytes that can be forwarded now. */
  push(chunk: Uint8Array): Buffer {
    const data = this.#pending.length > 0 ? Buffer.concat([this.#pending, chunk]) : Buffer.from(chunk);
    return this.#scan(data, false);
  }

  /** Ends the stream; returns what was held back, minus any marker (even a cut-off one). */
  end(): Buffer {
    const data = this.#pending;
    this.#pending = Buffer.alloc(0);
    return this.#scan(data, true);
  }

  #scan(input: Buffer, final: boolean): Buffer {
    const out: Buffer[] = [];
    let data = input;
    for (;;) {
      const s = data.indexOf(this.#start);
      if (s < 0) {
        const hold = final ? 0 : partialPrefixLength(data, this.#prefixes);
        out.push(data.subarray(0, data.length - hold));
        this.#pending = Buffer.from(data.subarray(data.length - hold));
        break;
      }
      // The marker line starts with the newline printed before it.
      let r = s;
      if (r > 0 && data[r - 1] === LF) {
        r--;
        if (r > 0 && data[r - 1] === CR) r--;
      }
      const bodyStart = s + this.#start.length;
      const e = data.indexOf(this.#end, bodyStart);
      if (e < 0) {
        if (data.length - bodyStart > MAX_MARKER_BODY_BYTES) {
          // Not a marker after all: release it as ordinary output and keep scanning.
          out.push(data.subarray(0, bodyStart));
          data = data.subarray(bodyStart);
          continue;
        }
        out.push(data.subarray(0, r));
        // At the end of the stream a cut-off marker is dropped, never shown.
        this.#pending = final ? Buffer.alloc(0) : Buffer.from(data.subarray(r));
        break;
      }
      let after = e + this.#end.length;
      if (!final && (after === data.length || (data[after] === CR && after + 1 === data.length))) {
        // The line's newline has not arrived yet.
        out.push(data.subarray(0, r));
        this.#pending = Buffer.from(data.subarray(r));
        break;
      }
      if (data[after] === CR && data[after + 1] === LF) after += 2;
      else if (data[after] === LF) after += 1;
      const body = parseMarkerBody(data.subarray(bodyStart, e));
      if (body.cwd !== undefined) {
        this.#cwd = body.cwd;
        this.#startCwd = body.startCwd;
      }
      this.#saved = body.saved;
      out.push(data.subarray(0, r));
      data = data.subarray(after);
    }
    return out.length === 1 && out[0] ? out[0] : Buffer.concat(out);
  }
}

/**
 * The marker body is the save flag, then `pwd`'s output: the path plus its
 * newline (`\r\n` under a PTY), then (from scripts that record it) the
 * resolved directory the command started in, on a line of its own, empty
 * when it could not be resolved. The cwd is undefined when the body is not
 * one or two lines of absolute paths: a process of the command that outlived
 * a kill (say `yes` on a timeout) can write into the middle of the marker,
 * and that text must not become the task's directory. A path with a newline
 * in it is not taken either.
 */
export function parseMarkerBody(body: Buffer): { saved: boolean; cwd: string | undefined; startCwd: string | undefined } {
  let text = body.toString('utf8');
  const saved = text.startsWith('+');
  if (text.startsWith('+') || text.startsWith('-')) text = text.slice(1);
  if (text.endsWith('\r\n')) text = text.slice(0, -2);
  else if (text.endsWith('\n')) text = text.slice(0, -1);
  const lines = text.split(/\r?\n/);
  if (lines.length > 2) return { saved, cwd: undefined, startCwd: undefined };
  const [end = '', start] = lines;
  const startCwd = start !== undefined && start.startsWith('/') ? start : undefined;
  // Empty: the directory was deleted under the shell (pwd failed and $PWD is unset).
  if (end === '') return { saved, cwd: '', startCwd };
  return end.startsWith('/') ? { saved, cwd: end, startCwd } : { saved, cwd: undefined, startCwd: undefined };
}

/** What the script does with the task's state. */
export type RunMode =
  /** Start in the task cwd; save the snapshot and report the new cwd. */
  | {
      readonly kind: 'task';
      readonly cwd: string;
      /** Where the task restarts when `cwd` is gone: the first of these that exists. */
      readonly resetCwds: readonly [string, string];
    }
  /** Start in `workdir` for this call only; save the snapshot, keep the task cwd. */
  | { readonly kind: 'workdir'; readonly workdir: string }
  /** Start in `dir`; save nothing (helpers, background processes). */
  | { readonly kind: 'stateless'; readonly dir: string; readonly isWorkdir: boolean };

export interface RunScriptSpec {
  /** The snapshot the command starts from. */
  readonly snapshotPath: string;
  /** A new file to save the state to (`task` and `workdir` modes); never one anybody reads yet. */
  readonly saveTo?: string;
  /** Superseded snapshot files to delete first (no one reads them any more). */
  readonly remove?: readonly string[];
  readonly marker: CwdMarker;
  readonly mode: RunMode;
  /** The command itself, or a file holding it (for commands too long for one argv string). */
  readonly command: { readonly text: string } | { readonly file: string };
}

/**
 * Builds the `bash -c` script for one command. Pure, so it is tested without
 * a shell. Internal commands are spelled `\builtin`/`\command` so that the
 * user's aliases and functions (cd, rm, printf, ...) cannot hijack them; the
 * whole script is one `{ ... }` group, parsed before the snapshot defines any
 * alias. Apart from `rm` for a batch of old snapshots now and then, only
 * builtins run besides the command.
 */
export function buildRunScript(spec: RunScriptSpec): string {
  const snap = shellQuote(spec.snapshotPath);
  // `2>/dev/null` first: a failing `>|` reports on the stderr current when it is applied.
  const save = (target: string) =>
    `if { \\builtin export -p; \\builtin declare -f; \\builtin alias -p; \\builtin printf '%s\\n' 'shopt -s expand_aliases'; } 2>/dev/null >|${shellQuote(target)};` +
    ' then __berth_f=+; else __berth_f=-; fi;';
  const remove =
    spec.remove && spec.remove.length > 0
      ? `\\command rm -f -- ${spec.remove.map(shellQuote).join(' ')} 2>/dev/null;`
      : '';
  // The second line is where the command started, resolved (see `resolveStart`), for the result's `cwd` comparison.
  const mark =
    `\\builtin printf '\\n%s%s' ${shellQuote(spec.marker.start)} "$__berth_f"; ` +
    `\\builtin pwd -P 2>/dev/null || \\builtin printf '%s\\n' "$PWD"; ` +
    `\\builtin printf '%s\\n%s\\n' "\${__berth_start-}" ${shellQuote(spec.marker.end)};`;
  /**
   * Records the start directory with symlinks resolved, without a fork: `cd -P .` sets $PWD to the
   * physical path; then back to `dir` so the command sees $PWD as it was given.
   */
  const resolveStart = (dir: string) =>
    `__berth_start=; \\builtin cd -P . 2>/dev/null && __berth_start=$PWD; \\builtin cd -- ${shellQuote(dir)} 2>/dev/null;`;
  /**
   * Saving runs once: inline after the command, or from our EXIT trap when
   * the command calls `exit`. The inline path leaves the trap in place so a
   * trap the command set itself still runs at exit. `set +x` comes first: a
   * traced marker line would otherwise be echoed into the output.
   */
  const finishers = (body: string) => ({
    trap: `__berth_rc=$?; if \\builtin test -z "\${__berth_saved-}"; then \\builtin set +x +e +u; ${body} fi; \\builtin exit "$__berth_rc"`,
    inline: `__berth_rc=$?; \\builtin set +x +e +u; __berth_saved=1; ${body} \\builtin exit "$__berth_rc"`,
  });

  // Plain `exec`: `builtin exec 2>&1` applies the redirection to the builtin
  // call only and undoes it, leaving stderr on its own pipe (out of order).
  // Nothing user-defined exists yet at this line: the snapshot comes after.
  const lines: string[] = ['{', 'exec 2>&1'];
  // `__berth_saved` is cleared after the snapshot: under `set -a` it could have been saved in it.
  lines.push(`if [ -r ${snap} ]; then \\builtin . ${snap} >/dev/null 2>&1; fi; __berth_saved=`);

  let evalLine: string;
  if ('text' in spec.command) {
    evalLine = `\\builtin eval ${shellQuote(spec.command.text)}`;
  } else {
    const file = shellQuote(spec.command.file);
    // The trailing x keeps $(...) from eating the command's final newlines.
    lines.push(
      `__berth_cmd="$(\\command cat -- ${file}; \\builtin printf x)"; \\command rm -f -- ${file}; __berth_cmd="\${__berth_cmd%x}"`,
    );
    evalLine = '\\builtin eval "$__berth_cmd"';
  }

  const mode = spec.mode;
  const saveTo = () => {
    if (spec.saveTo === undefined) throw new Error(`a ${mode.kind} run needs a file to save the state to`);
    return spec.saveTo;
  };
  const cdOrFail = (dir: string, message: string) =>
    `\\builtin cd -- ${shellQuote(dir)} 2>/dev/null || { \\builtin printf '%s\\n' ${shellQuote(message)}; \\builtin exit 126; }`;
  switch (mode.kind) {
    case 'task': {
      const [first, second] = mode.resetCwds;
      lines.push(
        `\\builtin cd -- ${shellQuote(mode.cwd)} 2>/dev/null || {` +
          ` if [ -d ${shellQuote(first)} ]; then __berth_to=${shellQuote(first)}; else __berth_to=${shellQuote(second)}; fi;` +
          ` \\builtin printf 'berth: cannot run the command: the working directory %s no longer exists. ` +
          `The working directory has been reset to %s; run the command again.\\n' ${shellQuote(mode.cwd)} "$__berth_to";` +
          ' \\builtin exit 126; }',
        resolveStart(mode.cwd),
      );
      const finish = finishers(`${remove} ${save(saveTo())} ${mark}`);
      lines.push(`\\builtin trap ${shellQuote(finish.trap)} EXIT`, evalLine, finish.inline);
      break;
    }
    case 'workdir': {
      // The marker reports the save; its cwd is the workdir's, which the task does not keep.
      lines.push(
        cdOrFail(mode.workdir, `berth: cannot run the command: workdir ${mode.workdir} is not a directory.`),
        resolveStart(mode.workdir),
      );
      const finish = finishers(`${remove} ${save(saveTo())} ${mark}`);
      lines.push(`\\builtin trap ${shellQuote(finish.trap)} EXIT`, evalLine, finish.inline);
      break;
    }
    case 'stateless': {
      const message = mode.isWorkdir
        ? `berth: cannot run the command: workdir ${mode.dir} is not a directory.`
        : `berth: cannot run the command: the working directory ${mode.dir} no longer exists.`;
      lines.push(cdOrFail(mode.dir, message), evalLine);
      break;
    }
  }
  lines.push('}');
  return lines.join('\n');
}

/**
 * The bootstrap script: a login shell writes the first snapshot. Variables
 * the login profile adds whose names look like provider secrets are dropped
 * (variables already in the environment were allowed by the backend).
 */
export function buildBootstrapScript(snapshotPath: string, initialCwd: string, login: boolean): string {
  const snap = shellQuote(snapshotPath);
  const tmp = `${shellQuote(`${snapshotPath}.tmp.`)}$$`;
  const inner = [
    `__berth_before=$'\\n'"$1"$'\\n'`,
    'for __berth_v in $(compgen -e); do',
    `  case "$__berth_before" in *$'\\n'"$__berth_v"$'\\n'*) continue;; esac`,
    `  if [[ \${__berth_v^^} =~ (${PROVIDER_SECRET_NAME_PARTS.join('|')}) ]]; then unset "$__berth_v"; fi`,
    'done',
    'unset OLDPWD __berth_v __berth_before',
    `cd -- ${shellQuote(initialCwd)} 2>/dev/null`,
    `{ export -p; declare -f; alias -p; printf '%s\\n' 'shopt -s expand_aliases'; } >${tmp} && mv -f -- ${tmp} ${snap}`,
  ].join('\n');
  // Names exported before the profile ran, passed to the login shell as $1.
  return `exec bash ${login ? '-l ' : ''}-c ${shellQuote(inner)} berth-bootstrap "$(compgen -e)" </dev/null`;
}

/** Where the bootstrap writes the first snapshot, in an environment's state dir. */
export function bootstrapSnapshotPath(stateDir: string): string {
  return posix.join(stateDir, 'shell-snapshot.sh');
}

/**
 * The bootstrap, for an environment that runs it ahead of time (see
 * `BackendEnvironment.preparedSnapshot`): the script, and the file it writes
 * when it exits 0. Always a login shell: when that fails, prepare nothing and
 * let the runner try both ways itself.
 */
export function buildPreparedSnapshot(stateDir: string, initialCwd: string): { readonly path: string; readonly script: string } {
  const path = bootstrapSnapshotPath(stateDir);
  return { path, script: buildBootstrapScript(path, initialCwd, true) };
}

/**
 * The script for a background command: snapshot and cwd (or workdir), no
 * state saved, stderr merged.
 */
export function buildBackgroundScript(
  spec: Omit<RunScriptSpec, 'mode' | 'saveTo' | 'remove'> & { readonly dir: string; readonly isWorkdir: boolean },
): string {
  return buildRunScript({ ...spec, mode: { kind: 'stateless', dir: spec.dir, isWorkdir: spec.isWorkdir } });
}

export interface ShellRunRequest {
  readonly command: string;
  readonly timeoutMs: number;
  /** Absolute directory for this call only. The task cwd is kept even if the command `cd`s. */
  readonly workdir?: string;
  readonly stdin?: string | Uint8Array;
  readonly pty?: boolean;
  /** Use the task's snapshot and cwd but save nothing back. */
  readonly stateless?: boolean;
  readonly signal?: AbortSignal;
  readonly env?: Readonly<Record<string, string>>;
  /** Output with the cwd marker removed, as produced. */
  readonly onOutput?: (chunk: Buffer) => void;
}

export interface ShellRunResult extends ExecResult {
  /** The task cwd after this call. */
  readonly cwd: string;
  /** Set when the saved cwd had vanished and was reset to this directory. */
  readonly cwdResetTo?: string;
  /**
   * Where the command started (the task cwd or the workdir) and where it
   * ended, both with symlinks resolved (`pwd -P`) where the shell could
   * resolve them. Set only when the command reported where it ended: it ran
   * to its end (or `exit`), was not timed out or interrupted, and ran in
   * `task` or `workdir` mode.
   */
  readonly cwdReport?: { readonly start: string; readonly end: string };
}

export interface ShellBackgroundRequest {
  readonly command: string;
  /** Directory to start in; the task cwd when absent. */
  readonly workdir?: string;
  readonly pty?: boolean;
  readonly env?: Readonly<Record<string, string>>;
  readonly onOutput: (chunk: Buffer) => void;
  readonly onExit: (exitCode: number) => void;
}

export interface ShellStateRunnerOptions {
  readonly logger?: Logger;
  /** Limit for the login-shell bootstrap; default 30 s. */
  readonly bootstrapTimeoutMs?: number;
  /**
   * Commands longer than this (quoted, in bytes) are staged in a file first,
   * because one argv string is limited to 128 KiB on Linux; default 96 KiB.
   */
  readonly stagingThresholdBytes?: number;
  /** Superseded snapshots are deleted once this many have gathered; default {@link SNAPSHOT_CLEANUP_BATCH}. */
  readonly snapshotCleanupBatch?: number;
}

/** How long a snapshot a background command started from is kept after it is superseded. */
const BACKGROUND_SNAPSHOT_HOLD_MS = 60_000;
/**
 * Superseded snapshots are deleted once this many have gathered... The `rm`
 * is a process start on that command's path (6-9 ms on the 2-core machines
 * here): at one command in 128 it stays out of the p99 of command latency.
 * The files are a few KB each.
 */
export const SNAPSHOT_CLEANUP_BATCH = 128;
/** ...and at most this many by one command. */
const SNAPSHOT_CLEANUP_MAX = 256;

/**
 * Persistent shell semantics for one {@link BackendEnvironment}. Create one
 * per environment; it only uses `env.exec` and `env.startBackground`.
 */
export class ShellStateRunner {
  readonly #env: BackendEnvironment;
  readonly #logger: Logger | undefined;
  readonly #bootstrapTimeoutMs: number;
  readonly #stagingThresholdBytes: number;
  readonly #cleanupBatch: number;
  readonly #marker: CwdMarker;
  /** The snapshot new commands start from. */
  #snapshotPath: string;
  #snapshotSeq = 0;
  /** Snapshot files in use by running commands: path → how many. */
  readonly #readers = new Map<string, number>();
  /** Background commands may source their snapshot after starting: path → not deleted before (epoch ms). */
  readonly #backgroundHolds = new Map<string, number>();
  /** Superseded snapshot files: path → not deleted before (epoch ms). */
  readonly #retired = new Map<string, number>();
  /** Retired files handed to a running command's script to delete. */
  readonly #removing = new Set<string>();
  #cwd: string;
  #bootstrap: Promise<void> | undefined;

  constructor(env: BackendEnvironment, options: ShellStateRunnerOptions = {}) {
    this.#env = env;
    this.#logger = options.logger;
    this.#bootstrapTimeoutMs = options.bootstrapTimeoutMs ?? 30_000;
    this.#stagingThresholdBytes = options.stagingThresholdBytes ?? 96 * 1024;
    this.#cleanupBatch = options.snapshotCleanupBatch ?? SNAPSHOT_CLEANUP_BATCH;
    this.#marker = cwdMarker(randomBytes(12).toString('hex'));
    this.#cwd = env.initialCwd;
    if (env.preparedSnapshot !== undefined) {
      // Written by the same bootstrap script before the task got the environment.
      this.#snapshotPath = env.preparedSnapshot;
      this.#bootstrap = Promise.resolve();
    } else {
      this.#snapshotPath = bootstrapSnapshotPath(env.stateDir);
    }
  }

  /** The task's current working directory (as last reported by a command). */
  get cwd(): string {
    return this.#cwd;
  }

  /** The snapshot file new commands start from (a new one after each command that saves). */
  get snapshotPath(): string {
    return this.#snapshotPath;
  }

  /** This environment's marker (tests use it to check stripping). */
  get marker(): CwdMarker {
    return this.#marker;
  }

  /** Writes the first snapshot; runs once, later calls share the result. A failure is retried by the next call. */
  bootstrap(): Promise<void> {
    this.#bootstrap ??= this.#runBootstrap().catch((err: unknown) => {
      this.#bootstrap = undefined;
      throw err;
    });
    return this.#bootstrap;
  }

  async #runBootstrap(): Promise<void> {
    let lastOutput = '';
    // A broken login profile must not make the task unusable: fall back to a plain shell.
    for (const login of [true, false]) {
      const chunks: Buffer[] = [];
      let kept = 0;
      const result = await this.#env.exec({
        script: buildBootstrapScript(this.#snapshotPath, this.#env.initialCwd, login),
        timeoutMs: this.#bootstrapTimeoutMs,
        onOutput: (chunk) => {
          if (kept < 4096) {
            chunks.push(chunk);
            kept += chunk.length;
          }
        },
      });
      lastOutput = Buffer.concat(chunks).toString('utf8').slice(0, 4096);
      const snapshot = await this.#env.stat(this.#snapshotPath);
      if (result.exitCode === 0 && snapshot.exists) return;
      this.#logger?.warn(
        { login, exitCode: result.exitCode, timedOut: result.timedOut, output: lastOutput },
        'shell snapshot bootstrap failed',
      );
    }
    throw new UnavailableError(
      `cannot start a shell in ${this.#env.description}: the shell snapshot could not be written (${lastOutput.trim() || 'no output'})`,
    );
  }

  /** Runs one command with the task's persistent state. */
  async run(request: ShellRunRequest): Promise<ShellRunResult> {
    await this.bootstrap();
    const startCwd = this.#cwd;
    const mode: RunMode = request.stateless
      ? { kind: 'stateless', dir: request.workdir ?? startCwd, isWorkdir: request.workdir !== undefined }
      : request.workdir !== undefined
        ? { kind: 'workdir', workdir: request.workdir }
        : { kind: 'task', cwd: startCwd, resetCwds: [this.#env.initialCwd, this.#env.homeDir] };
    const command = await this.#stage(request.command, request.signal);
    const source = this.#snapshotPath;
    const saveTo = mode.kind === 'stateless' ? undefined : this.#nextSnapshotPath();
    const remove = saveTo === undefined ? [] : this.#takeRemovable();
    const filter = new CwdMarkerFilter(this.#marker);
    const forward = (bytes: Buffer) => {
      if (bytes.length > 0) request.onOutput?.(bytes);
    };
    this.#readers.set(source, (this.#readers.get(source) ?? 0) + 1);
    let result: ExecResult;
    try {
      result = await this.#env.exec({
        script: buildRunScript({
          snapshotPath: source,
          ...(saveTo !== undefined ? { saveTo } : {}),
          remove,
          marker: this.#marker,
          mode,
          command,
        }),
        timeoutMs: request.timeoutMs,
        ...(request.stdin !== undefined ? { stdin: request.stdin } : {}),
        ...(request.signal ? { signal: request.signal } : {}),
        ...(request.env ? { env: request.env } : {}),
        ...(request.pty ? { pty: true } : {}),
        onOutput: (chunk) => forward(filter.push(chunk)),
      });
      forward(filter.end());
    } finally {
      this.#release(source);
      // A marker means the script got past the `rm`.
      for (const file of remove) {
        this.#removing.delete(file);
        if (filter.saved !== undefined) this.#retired.delete(file);
      }
      if (saveTo !== undefined) {
        if (filter.saved === true) this.#adopt(saveTo);
        else this.#retire(saveTo); // a cut-off or failed save: maybe a partial file
      }
    }

    // A killed command's marker, if any came, is not its own report of where it ended.
    const observed =
      mode.kind !== 'stateless' && !result.timedOut && !result.interrupted && filter.cwd !== undefined && filter.cwd !== ''
        ? { cwdReport: { start: filter.startCwd ?? (mode.kind === 'task' ? mode.cwd : mode.workdir), end: filter.cwd } }
        : {};
    if (mode.kind !== 'task') return { ...result, cwd: this.#cwd, ...observed };
    // An empty cwd means the directory was deleted under the shell; the next call resets it.
    if (filter.cwd !== undefined && filter.cwd !== '') {
      this.#cwd = filter.cwd;
      return { ...result, cwd: this.#cwd, ...observed };
    }
    // 126 without a marker: the script could not cd. Confirm before resetting the task cwd.
    if (result.exitCode === 126 && !result.timedOut && !result.interrupted && this.#cwd === startCwd) {
      const dir = await this.#env.stat(startCwd);
      if (!dir.exists || !dir.isDirectory) {
        // Same choice as the script's message: the initial directory, else home.
        const initial = await this.#env.stat(this.#env.initialCwd);
        this.#cwd = initial.isDirectory ? this.#env.initialCwd : this.#env.homeDir;
        return { ...result, cwd: this.#cwd, cwdResetTo: this.#cwd };
      }
    }
    return { ...result, cwd: this.#cwd };
  }

  /** Starts a background command with the task's snapshot and cwd; it saves no state. */
  async startBackground(request: ShellBackgroundRequest): Promise<BackgroundHandle> {
    await this.bootstrap();
    const command = await this.#stage(request.command);
    const source = this.#snapshotPath;
    // The process sources the file some time after it starts; keep the file a while.
    this.#backgroundHolds.set(source, Date.now() + BACKGROUND_SNAPSHOT_HOLD_MS);
    const script = buildBackgroundScript({
      snapshotPath: source,
      marker: this.#marker,
      command,
      dir: request.workdir ?? this.#cwd,
      isWorkdir: request.workdir !== undefined,
    });
    return this.#env.startBackground({
      script,
      ...(request.pty ? { pty: true } : {}),
      ...(request.env ? { env: request.env } : {}),
      onOutput: request.onOutput,
      onExit: request.onExit,
    });
  }

  #nextSnapshotPath(): string {
    this.#snapshotSeq += 1;
    return posix.join(this.#env.stateDir, `shell-snapshot.${this.#snapshotSeq}.sh`);
  }

  /** A finished command's snapshot becomes the current one (last writer wins). */
  #adopt(path: string): void {
    const previous = this.#snapshotPath;
    this.#snapshotPath = path;
    this.#retire(previous);
  }

  #retire(path: string): void {
    if (path === this.#snapshotPath) return;
    const hold = this.#backgroundHolds.get(path);
    this.#backgroundHolds.delete(path);
    this.#retired.set(path, Math.max(Date.now(), hold ?? 0));
  }

  #release(path: string): void {
    const count = (this.#readers.get(path) ?? 1) - 1;
    if (count > 0) this.#readers.set(path, count);
    else this.#readers.delete(path);
  }

  /**
   * Retired files nobody reads any more, once there are enough of them to be
   * worth one `rm` (amortised: one process start per {@link SNAPSHOT_CLEANUP_BATCH} commands by default).
   */
  #takeRemovable(): string[] {
    // Every call comes here: look through the retired files only once a batch could be ready.
    if (this.#retired.size < this.#cleanupBatch) return [];
    const now = Date.now();
    const ready: string[] = [];
    for (const [path, notBefore] of this.#retired) {
      if (notBefore <= now && !this.#readers.has(path) && !this.#removing.has(path)) ready.push(path);
      if (ready.length >= SNAPSHOT_CLEANUP_MAX) break;
    }
    if (ready.length < this.#cleanupBatch) return [];
    for (const path of ready) this.#removing.add(path);
    return ready;
  }

  /** Long commands go through a file in the state dir, written by `cat` from stdin (no argv limit). */
  async #stage(command: string, signal?: AbortSignal): Promise<{ text: string } | { file: string }> {
    if (Buffer.byteLength(shellQuote(command)) <= this.#stagingThresholdBytes) return { text: command };
    const file = posix.join(this.#env.stateDir, `command-${randomBytes(8).toString('hex')}.sh`);
    const staged = await this.#env.exec({
      script: `umask 077; cat > ${shellQuote(file)}`,
      stdin: command,
      timeoutMs: 30_000,
      ...(signal ? { signal } : {}),
    });
    if (staged.exitCode !== 0) {
      throw new UnavailableError(`cannot stage a ${command.length}-character command in ${this.#env.description}`);
    }
    return { file };
  }
}
