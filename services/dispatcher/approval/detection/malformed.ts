/**
 * Malformed executable payloads (docs/hermes-compat.md §5.3, §5.4): a
 * command whose quoting the detector cannot read where quoting decides what
 * runs. Upstream reports both cases under one description,
 * `command parser limit or malformed executable payload`:
 *
 * - **hardline**: a `grep`/`egrep` command whose own words do not parse (an
 *   unterminated quote or a dangling backslash before the command ends, an
 *   option that needs a value at the very end, `-P` with no pattern). Its
 *   pattern operands are blanked for detection when they parse, so an
 *   unreadable one must not pass unseen.
 * - **approval**: an interpreter (python, node, perl, ruby, php, powershell,
 *   bun, deno) or a program-running read tool (rg, sort, ag, man) whose words
 *   from the command name to the end of its segment do not split as POSIX
 *   shell words (an unterminated quote, a trailing backslash). What such a
 *   command runs cannot be read, so it needs approval, unless an earlier
 *   command already gave a more specific reason.
 *
 * The scanners (quoting-scanner.ts; the grep tier in malformed-grep.ts)
 * follow upstream's rules (quote and escape states, segment and
 * command-start boundaries, wrapper words) so the same commands are flagged;
 * they never expand anything. Work is bounded: a command whose scan would
 * exceed {@link SCAN_BUDGET} steps is reported as uninspectable instead.
 */

import { posixWords } from './posix-words.js';
import { basename, SCAN_BUDGET, ScanBudgetExceeded, Scanner } from './quoting-scanner.js';
import { findReadToolExec } from './read-tools.js';

export const MALFORMED_PAYLOAD_DESCRIPTION = 'command parser limit or malformed executable payload';

type Family = 'python' | 'node' | 'perl' | 'ruby' | 'php' | 'powershell' | 'bun' | 'deno';
const INTERPRETERS: readonly (readonly [Family, RegExp])[] = [
  ['python', /^(?:py(?:\.exe)?|python[23]?(?:\.\d+)*(?:\.exe)?)$/],
  ['node', /^node(?:js)?(?:\.exe)?$/],
  ['perl', /^perl[0-9]*(?:\.\d+)*(?:\.exe)?$/],
  ['ruby', /^ruby[0-9.]*(?:\.exe)?$/],
  ['php', /^php(?:\.exe)?$/],
  ['powershell', /^(?:powershell|pwsh)(?:\.exe)?$/],
  ['bun', /^bun(?:\.exe)?$/],
  ['deno', /^deno(?:\.exe)?$/],
];
const EXEC_FLAGS: Readonly<Record<Family, ReadonlySet<string>>> = {
  python: new Set(['-c']),
  node: new Set(['-e', '--eval', '-p', '--print']),
  perl: new Set(['-e', '--eval']),
  ruby: new Set(['-e']),
  php: new Set(['-r']),
  powershell: new Set(['-command', '-c', '-file', '-f']),
  bun: new Set(['-e', '--eval']),
  deno: new Set(['eval', '-e', '--eval']),
};
const OPTIONS_WITH_VALUE: Readonly<Record<Family, ReadonlySet<string>>> = {
  python: new Set(['-W', '-X', '--check-hash-based-pycs']),
  node: new Set(['-C', '--conditions', '--cpu-prof-dir', '--diagnostic-dir', '--icu-data-dir', '--import', '--loader', '--openssl-config', '--require', '--title']),
  perl: new Set(['-0', '-F', '-I', '-M', '-m', '-x']),
  ruby: new Set(['-C', '-E', '-F', '-I', '-K', '-r']),
  php: new Set(['-c', '-d', '-z']),
  powershell: new Set(['-configurationname', '-custompipename', '-executionpolicy', '-inputformat', '-outputformat', '-settingsfile', '-version', '-windowstyle', '-workingdirectory']),
  bun: new Set(['--config', '--cwd', '--env-file', '--preload', '--require']),
  deno: new Set(['-L', '--log-level']),
};
const SHELLS = new Set(['bash', 'sh', 'zsh', 'ksh', 'dash']);
const SHELL_OPTIONS_WITH_VALUE = new Set(['-O', '+O', '-o', '+o', '--init-file', '--rcfile']);
const SHELL_SHORT_LETTERS = new Set('ilrsDcabefhkmnptuvxBCEHPTOo');
const READ_TOOLS = new Set(['rg', 'sort', 'ag', 'man']);

function interpreterFamily(executable: string): Family | undefined {
  const name = basename(executable).toLowerCase();
  return INTERPRETERS.find(([, re]) => re.test(name))?.[0];
}

/** Upstream's option walk: does this interpreter get code to run from an option (`-c`, `-e`, `deno eval`)? */
function interpreterRunsCode(family: Family, args: readonly string[]): boolean {
  const flags = EXEC_FLAGS[family];
  const withValue = OPTIONS_WITH_VALUE[family];
  const powershell = family === 'powershell';
  let skip = false;
  for (const token of args) {
    if (skip) {
      skip = false;
      continue;
    }
    if (token === '--' || (!powershell && !token.startsWith('-'))) return family === 'deno' && token.toLowerCase() === 'eval';
    const eq = token.indexOf('=');
    const option = eq === -1 ? token : token.slice(0, eq);
    const comparable = powershell ? option.toLowerCase() : option;
    if (flags.has(comparable)) return true;
    const attachedValue = [...withValue].some((short) => short.startsWith('-') && !short.startsWith('--') && option.startsWith(short) && option.length > short.length);
    if (!powershell && !option.startsWith('--') && option.length > 2 && !attachedValue) {
      if ([...option.slice(1)].some((c) => flags.has(`-${c}`))) return true;
    }
    skip = withValue.has(comparable) && eq === -1;
  }
  return false;
}

/** Does a shell's argument list carry `-c` (bundles such as `-lc` count; `-o`/`-O` take a value)? */
function shellRunsString(args: readonly string[]): boolean {
  let i = 0;
  while (i < args.length) {
    const token = args[i] ?? '';
    if (token === '--' || !(token.startsWith('-') || token.startsWith('+'))) return false;
    if (SHELL_OPTIONS_WITH_VALUE.has(token)) {
      i += 2;
      continue;
    }
    const letters = token.slice(1);
    if (token.startsWith('--') || ![...letters].every((c) => SHELL_SHORT_LETTERS.has(c))) {
      i++;
      continue;
    }
    if (letters.includes('c')) return true;
    i += 1 + (letters.includes('O') || letters.includes('o') ? 1 : 0);
  }
  return false;
}

/**
 * The approval-tier finding: scans the normalised command's commands in order
 * and returns true when the first one that gives upstream a structural finding
 * (an interpreter or read tool running code, a shell's `-c`) is an interpreter
 * or read tool whose words do not parse. A command that parses and runs code
 * is reported by its own key instead (the pattern table has those).
 */
export function hasMalformedPayload(written: string, budget = SCAN_BUDGET): boolean {
  const scanner = new Scanner(budget);
  try {
    for (const segment of scanner.segments(normalizeForPayload(written))) {
      for (const { start, word } of scanner.commandWords(segment.text)) {
        const executable = scanner.deobfuscate(word);
        const name = basename(executable).toLowerCase();
        const family = interpreterFamily(executable);
        scanner.charge(segment.text.length - start);
        const tokens = posixWords(segment.text.slice(start));
        if (tokens === undefined) {
          if (family !== undefined || READ_TOOLS.has(name)) return true;
          continue;
        }
        if (tokens.length === 0) continue;
        const args = tokens.slice(1);
        if (family !== undefined && (interpreterRunsCode(family, args) || args.some((t) => t.startsWith('<<')))) return false;
        if (SHELLS.has(name) && shellRunsString(args)) return false;
        if (READ_TOOLS.has(name) && findReadToolExec([name, ...args].join(' ').toLowerCase(), written) !== undefined) return false;
      }
    }
    return false;
  } catch (err) {
    // Too complex to read is not proof of safety: ask.
    if (err instanceof ScanBudgetExceeded) return true;
    throw err;
  }
}

/**
 * Upstream's detection normalisation with letter case kept: NUL removed,
 * backslash-newline joined, backslash escapes and empty quote pairs dropped,
 * `$IFS` as a space. Quoting is read on this text, as upstream does.
 */
export function normalizeForPayload(written: string): string {
  return written
    .split('\0').join('')
    .replace(/\\\r?\n/g, '')
    .replace(/\\([^\n])/g, '$1')
    .replace(/''|""/g, '')
    .replace(/\$\{IFS\b[^}]*\}|\$IFS\b/g, ' ');
}
