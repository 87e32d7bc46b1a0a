/** The `bash -c` scripts the runner builds for a command: pure, so they are tested without a shell. */
import { shellQuote } from '../../common/shell/quote.js';
import type { CwdMarker } from './cwd-marker.js';

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
  /**
   * Benchmarks only (off unless set): a file to append one line to per
   * command, `T0 T1 T2 T3` (bash's `$EPOCHREALTIME`, seconds): the script
   * began, the snapshot was restored and the cwd entered, the command ended,
   * the state was saved and the marker printed. `task` and `workdir` modes;
   * builtins only, after the marker, so the output is the same.
   */
  readonly timingFile?: string;
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
  const timing = spec.timingFile === undefined ? undefined : shellQuote(spec.timingFile);
  const finishers = (saveAndMark: string) => {
    const ended = timing === undefined ? '' : ' __berth_t2=$EPOCHREALTIME;';
    const body =
      timing === undefined
        ? saveAndMark
        : `${saveAndMark} \\builtin printf '%s %s %s %s\\n' "\${__berth_t0-}" "\${__berth_t1-}" "\${__berth_t2-}" "$EPOCHREALTIME" 2>/dev/null >>${timing};`;
    return {
      trap: `__berth_rc=$?;${ended} if \\builtin test -z "\${__berth_saved-}"; then \\builtin set +x +e +u; ${body} fi; \\builtin exit "$__berth_rc"`,
      inline: `__berth_rc=$?;${ended} \\builtin set +x +e +u; __berth_saved=1; ${body} \\builtin exit "$__berth_rc"`,
    };
  };

  // Plain `exec`: `builtin exec 2>&1` applies the redirection to the builtin
  // call only and undoes it, leaving stderr on its own pipe (out of order).
  // Nothing user-defined exists yet at this line: the snapshot comes after.
  const lines: string[] = ['{', 'exec 2>&1'];
  if (timing !== undefined && spec.mode.kind !== 'stateless') lines.push('__berth_t0=$EPOCHREALTIME');
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
      if (timing !== undefined) lines.push('__berth_t1=$EPOCHREALTIME');
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
      if (timing !== undefined) lines.push('__berth_t1=$EPOCHREALTIME');
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
 * The script for a background command: snapshot and cwd (or workdir), no
 * state saved, stderr merged.
 */
export function buildBackgroundScript(
  spec: Omit<RunScriptSpec, 'mode' | 'saveTo' | 'remove'> & { readonly dir: string; readonly isWorkdir: boolean },
): string {
  return buildRunScript({ ...spec, mode: { kind: 'stateless', dir: spec.dir, isWorkdir: spec.isWorkdir } });
}
