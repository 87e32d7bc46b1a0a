/**
 * Where and how tool results are redacted, after upstream hermes-agent: terminal
 * and background-process output through `redact_terminal_output` (the
 * assignment passes only for env dumps and reads of secret-bearing files),
 * process commands in source-preserving mode, and file content (read_file,
 * search_files) with the non-reusable sentinel. Only what comes back is
 * redacted; what the agent sent is never touched.
 */
import { parseJsonObject } from '../../common/json-object.js';
import type { ProcessNotification } from '../../common/process-notification.js';
import { redactPythonDiagnosticLines, redactSensitiveText } from './redact.js';

/** Commands whose output is an environment dump (KEY=value lines), not source code. */
const ENV_DUMP_COMMANDS: ReadonlySet<string> = new Set(['env', 'printenv', 'set', 'export', 'declare']);
/** Commands that print file contents, plus the filters used on config files. */
const FILE_READ_COMMANDS: ReadonlySet<string> = new Set([
  'cat', 'head', 'tail', 'type', 'bat', 'less', 'more', 'nl', 'zcat', 'tac', 'view', 'batcat', 'grep', 'awk', 'sed',
]);
/** Filters whose first operand is a pattern or program, not a file. */
const PATTERN_FIRST_COMMANDS: ReadonlySet<string> = new Set(['grep', 'awk', 'sed']);
/**
 * Project environment files that hold credentials (upstream `_BLOCKED_PROJECT_ENV_BASENAMES`, compared
 * lower-cased): a command reading one gets its assignments masked, and a search rooted at one is refused
 * (search_files). Search results inside them cannot occur (every name is a dotfile, and hidden files are never
 * listed), so upstream's `_omitted` filter has nothing to do there.
 */
export const SECRET_ENV_BASENAMES: ReadonlySet<string> = new Set([
  '.env',
  '.env.local',
  '.env.development',
  '.env.production',
  '.env.test',
  '.env.staging',
  '.envrc',
]);
const SHELL_RC_BASENAMES: ReadonlySet<string> = new Set([
  '.bashrc', '.bash_profile', '.bash_login', '.profile', '.zshrc', '.zprofile', '.zlogin', '.zshenv',
]);
const HERMES_HOME_PREFIXES = ['$HERMES_HOME/', '${HERMES_HOME}/'];
const HOME_PREFIXES = ['$HOME/', '${HOME}/'];

/** Pipeline and sequence segments, split on `|`, `;` and `&` outside quotes (backslash is not an escape). */
export function commandSegments(command: string): string[] {
  const segments: string[] = [];
  let current = '';
  let quote: string | undefined;
  for (const ch of command) {
    if (quote !== undefined) {
      current += ch;
      if (ch === quote) quote = undefined;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      current += ch;
    } else if (ch === '|' || ch === ';' || ch === '&') {
      if (current.trim() !== '') segments.push(current.trim());
      current = '';
    } else {
      current += ch;
    }
  }
  if (current.trim() !== '') segments.push(current.trim());
  return segments;
}

/** The first word of a segment as a shell would read it (quotes removed). */
function firstWord(segment: string): string {
  let word = '';
  let quote: string | undefined;
  for (const ch of segment) {
    if (quote !== undefined) {
      if (ch === quote) quote = undefined;
      else word += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
    } else if (/\s/.test(ch)) {
      if (word !== '') break;
    } else {
      word += ch;
    }
  }
  return word;
}

/** True when a segment of the command starts with env, printenv, set, export or declare. */
export function isEnvDumpCommand(command: string | undefined): boolean {
  if (command === undefined || command === '') return false;
  return commandSegments(command).some((segment) => ENV_DUMP_COMMANDS.has(firstWord(segment)));
}

/**
 * A path whose content is a credential dump: a project `.env*` file or a shell rc anywhere, or `config.yaml`
 * (and its backup copies) under a `.hermes` directory or `$HERMES_HOME`. Paths with other variables are not known.
 */
export function isSecretFilePath(arg: string): boolean {
  let path = arg.replace(/^["']+|["']+$/g, '').replaceAll('\\', '/');
  let hermesHome = false;
  for (const prefix of HERMES_HOME_PREFIXES) {
    if (path.startsWith(prefix)) {
      path = path.slice(prefix.length);
      hermesHome = true;
      break;
    }
  }
  for (const prefix of HOME_PREFIXES) {
    if (path.startsWith(prefix)) {
      path = path.slice(prefix.length);
      break;
    }
  }
  if (path.includes('$')) return false;
  const parts = path.split('/').filter((part) => part !== '').map((part) => part.toLowerCase());
  const base = parts[parts.length - 1];
  if (base === undefined) return false;
  if (SECRET_ENV_BASENAMES.has(base) || SHELL_RC_BASENAMES.has(base)) return true;
  if (base !== 'config.yaml' && !base.startsWith('config.yaml.good.') && !base.startsWith('config.yaml.corrupt.')) return false;
  return hermesHome || parts.slice(0, -1).includes('.hermes');
}

/** True when a segment runs a file reader (cat, grep, ...) on a secret-bearing file. */
export function commandReadsSecretFile(command: string | undefined): boolean {
  if (command === undefined || command === '') return false;
  for (const segment of commandSegments(command)) {
    const tokens = segment.split(/\s+/).filter((t) => t !== '');
    const reader = (tokens[0] ?? '').split('/').pop()?.toLowerCase() ?? '';
    if (!FILE_READ_COMMANDS.has(reader)) continue;
    let operands = tokens.slice(1).filter((t) => !t.startsWith('-'));
    if (PATTERN_FIRST_COMMANDS.has(reader)) operands = operands.slice(1);
    if (operands.some(isSecretFilePath)) return true;
  }
  return false;
}

/** Whether redaction runs, and nothing else: the operator's `security.redact_secrets`. */
export interface RedactionSwitch {
  readonly redactSecrets: boolean;
}

/**
 * Upstream `redact_terminal_output`: one policy for the terminal result and every process result. The
 * assignment passes run only when the command dumps the environment or reads a secret-bearing file; otherwise
 * source and config dumps keep `MAX_TOKENS=100`, and only Python diagnostic lines get the repr pass.
 */
export function redactTerminalOutput(output: string, command: string | undefined): string {
  if (output === '') return output;
  const codeFile = !(isEnvDumpCommand(command) || commandReadsSecretFile(command));
  let redacted = redactSensitiveText(output, { codeFile });
  if (codeFile && redacted.includes(':') && redacted.includes("'")) redacted = redactPythonDiagnosticLines(redacted);
  return redacted;
}

/** File content for the model (read_file, search_files): the sentinel mask, assignments only in secret files. */
export function redactFileContent(content: string, path?: string): string {
  return redactSensitiveText(content, { fileRead: true, secretFile: path !== undefined && isSecretFilePath(path) });
}

type JsonObject = Record<string, unknown>;

/** Upstream `_redact_process_result`: output fields by the recorded command, then the command itself. */
function redactProcessEntry(entry: JsonObject): JsonObject {
  const command = typeof entry.command === 'string' ? entry.command : '';
  const out: JsonObject = { ...entry };
  for (const key of ['output', 'output_preview']) {
    const value = out[key];
    if (typeof value === 'string' && value !== '') out[key] = redactTerminalOutput(value, command);
  }
  if (command !== '') out.command = redactSensitiveText(command, { codeFile: true });
  return out;
}

/**
 * A background-process event for the agent (common/process-notification.ts),
 * masked as upstream's `_redact_process_result` masks every event it queues:
 * `output` by the process's command, then `command` itself. Summaries
 * without a process (watch overflow) carry neither and come back as they were.
 */
export function redactProcessEvent<T extends ProcessNotification>(event: T): T {
  return redactProcessEntry({ ...event }) as T;
}

/** Actions whose results carry process output (upstream redacts these; stdin actions return only a status). */
const OUTPUT_ACTIONS: ReadonlySet<string> = new Set(['poll', 'log', 'wait', 'kill']);

/**
 * Redacts a process_manage result (the executor's JSON): `output`, `output_preview` and `command` of poll,
 * log, wait and kill, and of every entry of list. Anything that is not such JSON is returned as it came.
 */
export function redactProcessResult(action: string, result: string): string {
  if (action !== 'list' && !OUTPUT_ACTIONS.has(action)) return result;
  const object = parseJsonObject(result);
  if (object === undefined) return result;
  let redacted: JsonObject;
  if (action === 'list') {
    if (!Array.isArray(object.processes)) return result;
    redacted = {
      ...object,
      processes: object.processes.map((p: unknown) =>
        typeof p === 'object' && p !== null && !Array.isArray(p) ? redactProcessEntry(p as JsonObject) : p,
      ),
    };
  } else {
    redacted = redactProcessEntry(object);
  }
  const text = JSON.stringify(redacted);
  // Unchanged results keep the executor's exact text.
  return text === JSON.stringify(object) ? result : text;
}
