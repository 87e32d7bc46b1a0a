/**
 * Recovery hints for a foreground command's result (the `hint` key): one
 * short next step for a failure whose output has a well-known shape, and a
 * warning when exit code 0 probably hides a failure (`cmd | tail`,
 * `cmd || echo`).
 *
 * Texts, patterns, their order and the 4,000-character scan window are the
 * reference tool's (`tools/terminal_hints.py`), so an agent reads the same
 * hint for the same output. The patterns are written for JavaScript with
 * Python's meanings kept: `\w`, `\d` and `\s` are Unicode-aware, `.` stops
 * only at `\n`, and a multi-line `^` starts only after `\n`.
 */
import type { TerminalGuard } from './terminal-guard.js';

/** Only the head of the output is scanned: hints key on error headers, not deep context. */
const SCAN_CHARS = 4000;

/** Python's `\w` for str patterns. */
const W = String.raw`[\p{L}\p{N}_]`;
/** The characters of Python's `\s` for str patterns (`str.isspace`). */
const SPACE_CHARS = String.raw`\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000`;
/** Python's `\s` and `\S`. */
const S = `[${SPACE_CHARS}]`;
const NS = `[^${SPACE_CHARS}]`;
/** Python's `\d` for str patterns. */
const D = String.raw`\p{Nd}`;
/** Python's multi-line `^`: the start of the text or just after a `\n`. */
const BOL = String.raw`(?:(?<![\s\S])|(?<=\n))`;

type OutputHint = (output: string) => string | undefined;

/** A hint that fires when `pattern` matches; `{0}` in the text is the first group, or `text(group1)`. */
function regexHint(pattern: string, text: string | ((group: string) => string)): OutputHint {
  const regex = new RegExp(pattern, 'u');
  return (output) => {
    const match = regex.exec(output);
    if (match === null) return undefined;
    const group = match[1] ?? '';
    return typeof text === 'function' ? text(group) : text.replaceAll('{0}', group);
  };
}

/** Most "command not found" failures are a bare `python` or `pip` on a python3-only system. */
const MISSING_COMMAND_HINTS: ReadonlyMap<string, string> = new Map([
  [
    'python',
    "This system has no bare `python` — use `python3`, or the project venv's interpreter (e.g. .venv/bin/python).",
  ],
  [
    'pip',
    "This system has no bare `pip` — use `pip3`, `python3 -m pip`, or the project venv's pip (e.g. .venv/bin/pip).",
  ],
]);

function missingCommandHint(missing: string): string {
  return (
    MISSING_COMMAND_HINTS.get(missing) ??
    `\`${missing}\` is not installed or not on PATH. Verify with \`which ${missing}\`; install it or use an absolute ` +
      'path instead of retrying the same command.'
  );
}

/**
 * Errors of generated source whose text payload collided with the code
 * carrying it (a typographic character in code position, or a payload quote
 * closing the literal).
 */
const PAYLOAD_QUOTING_PATTERNS: readonly string[] = [
  'SyntaxError: invalid character',
  'SyntaxError: unterminated (?:triple-quoted )?string literal',
  'SyntaxError: EOL while scanning string literal',
  'SyntaxError: EOF while scanning triple-quoted string literal',
  'unexpected EOF while looking for matching',
  `(?:^|${S})zsh:${D}*:? unmatched`,
];

const PAYLOAD_QUOTING_HINT =
  'The generated source contains a character that cannot appear in code position — typographic punctuation, or ' +
  'a payload quote closing the literal that carries it — so the same source will fail again. Leave the payload ' +
  'text alone: write it to a file with write_file and pass the file (`gh ... --body-file <file>`, ' +
  '`gh api -F body=@<file>`, `open(path).read()`); a character that is merely stray in the generated code may be ' +
  'swapped for ASCII.';

/** In the reference tool's order (by how often each is seen); the first match wins. */
const OUTPUT_HINTS: readonly OutputHint[] = [
  regexHint(
    `Unknown JSON field: "?(${W}+)`,
    "The installed gh does not support the JSON field '{0}'. The valid field list is printed in the output above — " +
      'retry using only fields from that list.',
  ),
  regexHint(
    `${BOL}CONFLICT |Automatic merge failed|needs merge`,
    'Git merge conflict. Do not retry this command. Resolve the conflicted files listed above (edit, then ' +
      '`git add`), then continue (`git rebase --continue` / commit the merge) — or abort with `--abort`.',
  ),
  regexHint(`(?:bash: line ${D}+: |bash: |sh: ${D}*:? ?)?([\\p{L}\\p{N}_.+-]+): command not found`, missingCommandHint),
  regexHint(
    `(?:ModuleNotFoundError|ImportError): No module named '?([\\p{L}\\p{N}_.]+)`,
    "Python cannot import '{0}'. Most often the wrong interpreter is running: activate the project venv (e.g. " +
      '`source .venv/bin/activate`) or invoke its python directly. Only pip install if the package is genuinely ' +
      'absent from that venv.',
  ),
  regexHint(
    "(?:fatal|error):[^\\n]*?'([^']+)' already exists",
    "'{0}' already exists — retrying unchanged will keep failing. Reuse it, choose another name, or delete it first " +
      'if it is genuinely stale.',
  ),
  regexHint(
    'API rate limit|was submitted too quickly',
    'GitHub API rate limit hit — immediate retries will keep failing. Continue with other work and retry this ' +
      'operation later.',
  ),
  regexHint(
    'Permission denied|EACCES',
    'Permission denied. Check ownership/mode of the target path (`ls -la`); prefer a user-writable location. Only ' +
      'escalate to sudo if the task genuinely requires it.',
  ),
  regexHint(`(?:${PAYLOAD_QUOTING_PATTERNS.join('|')})`, PAYLOAD_QUOTING_HINT),
];

/** Hints by exit code alone, checked after the output patterns. */
const EXIT_CODE_HINTS: ReadonlyMap<number, string> = new Map([
  [
    126,
    'Exit 126: the file was found but is not executable — `chmod +x` it or invoke it via its interpreter (e.g. ' +
      '`bash script.sh`).',
  ],
  [
    137,
    'Exit 137: the process was SIGKILLed — usually out-of-memory or an external kill. Reduce memory use or check ' +
      '`dmesg | tail` before retrying.',
  ],
  [
    124,
    'Exit 124: the command hit its timeout. Raise timeout= (foreground max 600s) or run it with background=true and ' +
      'notify_on_complete=true.',
  ],
]);

/** The first `count` characters counted as Python counts them (code points), so a pair is never split. */
function headCodePoints(text: string, count: number): string {
  if (text.length <= count) return text;
  let end = 0;
  let seen = 0;
  for (const ch of text) {
    if (seen === count) break;
    end += ch.length;
    seen++;
  }
  return text.slice(0, end);
}

/**
 * One recovery hint for a failed command (exit code not 0), or undefined.
 * The caller asks only when the exit code has no `exit_code_meaning`.
 */
export function failureHint(exitCode: number, output: string): string | undefined {
  if (exitCode === 0) return undefined;
  const window = headCodePoints(output, SCAN_CHARS);
  if (window !== '') {
    for (const hint of OUTPUT_HINTS) {
      const text = hint(window);
      if (text !== undefined) return text;
    }
  }
  return EXIT_CODE_HINTS.get(exitCode);
}

// Masked success: `cargo build 2>&1 | tail -20` exits with tail's 0 and
// `cargo build || echo FAILED` with echo's, while the output says the build
// failed. Both a masking command shape and a tool-specific failure shape must
// be present; commands that only read (`grep ... | head`) are left alone.

const PASSTHROUGH_CONSUMERS = `(?:tail|head|cat|tee|less|more|wc|sort|uniq)(?!${W})`;

const MASKING_SHAPES: readonly (readonly [RegExp, string])[] = [
  [
    new RegExp(`(?<!\\|)\\|(?!\\|)${S}*${PASSTHROUGH_CONSUMERS}[^|]*$`, 'u'),
    'exit_code 0 here is the status of the last pipeline command (tail/head/cat/...), NOT of the command before the ' +
      'pipe — and the output contains failure indicators. Treat this run as FAILED until proven otherwise: re-run ' +
      'the command WITHOUT the pipe (output is auto-truncated and the full text is saved to a file, so piping ' +
      'through tail/head is never needed) to get the real exit code.',
  ],
  [
    new RegExp(`\\|\\|${S}*(?:echo(?!${W})|printf(?!${W})|true(?!${W})|:${S}|:$)`, 'u'),
    'exit_code 0 here is the status of the `||` fallback (echo/true), NOT of the command before it — and the output ' +
      'contains failure indicators. Treat this run as FAILED until proven otherwise: re-run the command bare to get ' +
      'its real exit code.',
  ],
];

const READONLY_HEADS: ReadonlySet<string> = new Set([
  'grep',
  'rg',
  'ag',
  'find',
  'ls',
  'cat',
  'head',
  'tail',
  'jq',
  'awk',
  'sed',
  'strings',
  'zcat',
  'journalctl',
  'dmesg',
  'echo',
  'printf',
]);

/** Failure shapes tied to specific tools, so output that merely mentions errors rarely matches. */
const FAILURE_SHAPES = new RegExp(
  [
    String.raw`error\[E${D}+\]`,
    'error: could not compile',
    'error: aborting due to',
    String.raw`Traceback \(most recent call last\)`,
    `${BOL}(?:=+ )?${D}+ failed`,
    String.raw`${BOL}FAILED (?:${NS}+::|${NS}+\.py)`,
    String.raw`compilation terminated\.`,
    'npm ERR!',
    'BUILD FAILED|Build FAILED',
    'FAILED: ',
    String.raw`${BOL}make(?:\[${D}+\])?: \*\*\*`,
  ].join('|'),
  'u',
);

const WHITESPACE_RUN = new RegExp(`${S}+`, 'u');

/** Basename of the command's first word that is not a `VAR=value` assignment. */
function firstToken(command: string): string {
  for (const token of command.split(WHITESPACE_RUN)) {
    if (token === '') continue;
    if (!token.includes('=') || token.startsWith('=') || token.startsWith('./') || token.startsWith('/')) {
      return token.slice(token.lastIndexOf('/') + 1);
    }
  }
  return '';
}

/** A warning when exit code 0 probably masks a failure; the caller asks only for exit code 0. */
export function maskedSuccessHint(command: string, output: string): string | undefined {
  const window = headCodePoints(output, SCAN_CHARS);
  if (command === '' || window === '' || READONLY_HEADS.has(firstToken(command)) || !FAILURE_SHAPES.test(window)) {
    return undefined;
  }
  return MASKING_SHAPES.find(([shape]) => shape.test(command))?.[1];
}

/**
 * Sets the result's `hint`, as the reference tool: a recovery hint for a
 * failure with no exit-code meaning, a warning for a 0 that probably masks
 * one. It runs before Berth's own notices are added to the output, so only
 * the command's output is scanned.
 */
export const failureHintsGuard: TerminalGuard = {
  name: 'failure-hints',
  afterRun(outcome) {
    const { exitCode, output } = outcome;
    if (exitCode === 0) outcome.hint = maskedSuccessHint(outcome.call.command, output);
    else if (outcome.exitCodeMeaning === undefined) outcome.hint = failureHint(exitCode, output);
  },
};
