/**
 * The two bash scripts an execute_code run needs, as pure builders, so they
 * work on every backend that can run `bash -c`:
 *
 * - the probe reports, from inside the environment, the interpreter to use,
 *   the sandbox user's uid/gid, the directory and the environment a process
 *   would get there (in project mode after the task's shell state is loaded);
 * - the launcher reads the scrubbed environment from stdin and starts the
 *   script with exactly that environment (`env -i`), stdout to the caller,
 *   stderr's head into a file.
 */
import { shellQuote } from '../../common/shell/quote.js';

export type CodeMode = 'project' | 'strict';

/** Python versions older than this are skipped in project mode. */
const MIN_PYTHON = '(3, 8)';

/**
 * The probe script. Output: NUL-separated records between two `nonce`
 * records: interpreter, uid, gid, cwd, then `NAME=VALUE` per exported
 * variable. Only bash builtins run (no `env -0`, no `id`): every fork here
 * is on each execute_code call's path.
 */
export function buildProbeScript(nonce: string, mode: CodeMode): string {
  const lines = ['__berth_py=python3'];
  if (mode === 'project') {
    // The project's interpreter: $VIRTUAL_ENV, then $CONDA_PREFIX, when it runs and is new enough.
    lines.push(
      'for __berth_c in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" "${CONDA_PREFIX:+$CONDA_PREFIX/bin/python}"; do',
      `  if [ -n "$__berth_c" ] && [ -x "$__berth_c" ] && "$__berth_c" -c ${shellQuote(`import sys; sys.exit(0 if sys.version_info >= ${MIN_PYTHON} else 1)`)} </dev/null >/dev/null 2>&1; then`,
      '    __berth_py=$__berth_c; break',
      '  fi',
      'done',
    );
  }
  lines.push(
    `__berth_n=${shellQuote(nonce)}`,
    // $EUID and GROUPS[0] (bash puts the primary group first) instead of `id -u`/`id -g`: two forks less.
    `\\builtin printf '%s\\0%s\\0%s\\0%s\\0%s\\0' "$__berth_n" "$__berth_py" "\${EUID-}" "\${GROUPS[0]-}" "$PWD"`,
    'for __berth_v in $(\\builtin compgen -e); do \\builtin printf \'%s=%s\\0\' "$__berth_v" "${!__berth_v}"; done',
    `\\builtin printf '%s\\0' "$__berth_n"`,
  );
  return lines.join('\n');
}

export interface ProbeResult {
  readonly interpreter: string;
  /** Undefined when the shell did not say (not bash). */
  readonly uid: number | undefined;
  readonly gid: number | undefined;
  readonly cwd: string;
  readonly env: Record<string, string>;
}

function parseId(text: string): number | undefined {
  return /^\d+$/.test(text) ? Number(text) : undefined;
}

/** Parses the probe's output; undefined when the records are missing (the probe did not finish). */
export function parseProbeOutput(output: string, nonce: string): ProbeResult | undefined {
  const start = output.indexOf(`${nonce}\0`);
  if (start < 0) return undefined;
  const records = output.slice(start + nonce.length + 1).split('\0');
  const end = records.indexOf(nonce);
  if (end < 4) return undefined;
  const [interpreter, uid, gid, cwd] = records;
  const env: Record<string, string> = {};
  for (const record of records.slice(4, end)) {
    const eq = record.indexOf('=');
    if (eq > 0) env[record.slice(0, eq)] = record.slice(eq + 1);
  }
  return { interpreter: interpreter || 'python3', uid: parseId(uid ?? ''), gid: parseId(gid ?? ''), cwd: cwd ?? '', env };
}

export interface LauncherSpec {
  /** Directory to run in (inside the environment). */
  readonly dir: string;
  readonly interpreter: string;
  /** script.py, inside the environment. */
  readonly scriptPath: string;
  /** Where the head of stderr goes, inside the environment. */
  readonly stderrPath: string;
  readonly maxStderrBytes: number;
}

/**
 * The launcher. Reads `NAME=VALUE` records (NUL-terminated) from stdin,
 * then runs the interpreter under `env -i` with exactly those, stdin from
 * /dev/null. The script's stdout is the launcher's stdout; the first
 * `maxStderrBytes` of its stderr go into a file and the rest is drained, so
 * the script never blocks on a full pipe. Exits with the script's exit
 * status.
 *
 * The stderr side is bash's own `read -N` (bytes, with LC_ALL=C): `head -c`
 * and `cat` there were two process starts on every run, about 8 ms of a
 * hello-world here. NUL bytes in stderr are dropped (bash strings cannot hold
 * them). Bash before 4.1 has no `read -N`: it gets head and cat.
 */
export function buildLauncherScript(spec: LauncherSpec): string {
  const errFile = shellQuote(spec.stderrPath);
  const dir = shellQuote(spec.dir);
  const max = Math.max(0, Math.floor(spec.maxStderrBytes));
  const builtinDrain =
    `LC_ALL=C; IFS= \\builtin read -r -d '' -N ${max} __berth_e; \\builtin printf '%s' "$__berth_e" >${errFile}; ` +
    "while IFS= \\builtin read -r -d '' -N 65536 __berth_e; do :; done";
  const commandDrain = `\\command head -c ${max} >${errFile}; \\command cat >/dev/null`;
  return [
    '__berth_env=()',
    "while IFS= read -r -d '' __berth_kv; do __berth_env+=(\"$__berth_kv\"); done",
    `\\builtin cd -- ${dir} 2>/dev/null || { \\builtin printf 'cannot run the script: %s is not a directory\\n' ${dir} >${errFile}; \\builtin exit 126; }`,
    'exec 3>&1',
    `\\command env -i "\${__berth_env[@]}" ${shellQuote(spec.interpreter)} ${shellQuote(spec.scriptPath)} 2>&1 1>&3 3>&- </dev/null` +
      ` | { if ((BASH_VERSINFO[0] > 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] >= 1))); then ${builtinDrain}; else ${commandDrain}; fi; } 3>&-`,
    '\\builtin exit "${PIPESTATUS[0]}"',
  ].join('\n');
}
