/**
 * The foreground guardrail: refuses a foreground command that would detach
 * (`nohup`, `&`) or never finish (servers, watchers, followers), with the
 * reference tool's guidance texts.
 */
import { commandName } from '../../../../common/shell/scan.js';
import { lexShell, splitCommands } from '../../../../common/shell/tokens.js';
import { hasLongFlag, hasShortFlag, positionals, resolveCommand, type ResolvedCommand } from './resolve-command.js';
import { refusal, type TerminalGuard } from './terminal-guard.js';

/** Commands whose only purpose is to detach a process from the caller. */
const DETACHERS = new Set(['nohup', 'disown', 'setsid']);

/** package.json scripts that by convention serve or watch until stopped. */
const LONG_RUNNING_SCRIPTS = ['dev', 'start', 'serve', 'watch', 'preview'];

function isLongRunningScript(script: string | undefined): script is string {
  return (
    script !== undefined &&
    LONG_RUNNING_SCRIPTS.some((name) => script === name || script.startsWith(`${name}:`))
  );
}

const PYTHON = /^python(?:\d+(?:\.\d+)?)?$/;

/** Python modules that start a server when run with `-m`. */
const PYTHON_SERVER_MODULES = new Set([
  'http.server', 'SimpleHTTPServer', 'uvicorn', 'gunicorn', 'hypercorn', 'daphne',
]);

/** Servers and followers that never exit on their own, whatever their arguments. */
const ALWAYS_LONG_RUNNING = new Set([
  'nodemon',
  'uvicorn',
  'gunicorn',
  'hypercorn',
  'daphne',
  'http-server',
  'live-server',
  'webpack-dev-server',
  'watch',
]);

/** First-positional subcommands that start a server: `next dev`, `rails s`, ... */
const SERVER_SUBCOMMANDS: ReadonlyMap<string, ReadonlySet<string>> = new Map([
  ['next', new Set(['dev', 'start'])],
  ['flask', new Set(['run'])],
  ['rails', new Set(['server', 's'])],
  ['jupyter', new Set(['notebook', 'lab', 'server'])],
  ['webpack', new Set(['serve'])],
  ['ng', new Set(['serve'])],
  ['hugo', new Set(['server', 'serve'])],
  ['mkdocs', new Set(['serve'])],
  ['jekyll', new Set(['serve', 's'])],
]);

/**
 * Returns a short label (`npm run dev`, `tail -f`) when the resolved command
 * runs until stopped, else null.
 */
function longRunningLabel({ name, args }: ResolvedCommand): string | null {
  const positional = positionals(args);
  const first = positional[0];
  switch (name) {
    case 'npm':
      if (first === 'start') return 'npm start';
      if ((first === 'run' || first === 'run-script') && isLongRunningScript(positional[1])) {
        return `npm run ${positional[1]}`;
      }
      return null;
    case 'yarn':
    case 'pnpm':
    case 'bun':
      if (isLongRunningScript(first)) return `${name} ${first}`;
      if (first === 'run' && isLongRunningScript(positional[1])) return `${name} run ${positional[1]}`;
      return null;
    case 'vite':
      // Bare `vite`, `vite dev`, `vite serve` and `vite preview` all serve; only builds finish.
      return positional.includes('build') || positional.includes('optimize') ? null : 'vite';
    case 'php':
      return args.includes('-S') ? 'php -S' : null;
    case 'docker':
      if (args.includes('compose')) return composeLabel('docker compose', args.slice(args.indexOf('compose') + 1));
      if (first === 'logs' && (hasShortFlag(args, 'f') || hasLongFlag(args, '--follow'))) return 'docker logs -f';
      return null;
    case 'docker-compose':
      return composeLabel('docker-compose', args);
    case 'kubectl':
      if (first === 'port-forward') return 'kubectl port-forward';
      if (first === 'logs' && (hasShortFlag(args, 'f') || hasLongFlag(args, '--follow'))) return 'kubectl logs -f';
      return null;
    case 'tail':
      return hasShortFlag(args, 'fF') || hasLongFlag(args, '--follow') ? 'tail -f' : null;
    case 'journalctl':
      return hasShortFlag(args, 'f') || hasLongFlag(args, '--follow') ? 'journalctl -f' : null;
    case 'tsc':
      return hasLongFlag(args, '--watch') || args.includes('-w') ? 'tsc --watch' : null;
    case 'jest':
      return hasLongFlag(args, '--watch', '--watchAll') ? 'jest --watch' : null;
    case 'sleep':
      return first === 'infinity' || first === 'inf' ? 'sleep infinity' : null;
    default:
      break;
  }
  if (PYTHON.test(name)) {
    const moduleIndex = args.indexOf('-m');
    const module = moduleIndex === -1 ? undefined : args[moduleIndex + 1];
    if (module !== undefined && PYTHON_SERVER_MODULES.has(module)) return `${name} -m ${module}`;
    if (module === 'flask' && positionals(args.slice(moduleIndex + 2))[0] === 'run') return `${name} -m flask run`;
    if (first !== undefined && commandName(first) === 'manage.py' && positional[1] === 'runserver') {
      return 'manage.py runserver';
    }
    return null;
  }
  if (ALWAYS_LONG_RUNNING.has(name)) return name;
  const serverSubcommands = SERVER_SUBCOMMANDS.get(name);
  if (first !== undefined && serverSubcommands?.has(first)) return `${name} ${first}`;
  return null;
}

/** `compose up` stays attached unless detached (`-d`) or told to return once healthy (`--wait`). */
function composeLabel(prefix: string, args: readonly string[]): string | null {
  if (args.includes('logs') && (hasShortFlag(args, 'f') || hasLongFlag(args, '--follow'))) return `${prefix} logs -f`;
  if (!args.includes('up')) return null;
  if (hasShortFlag(args, 'd') || hasLongFlag(args, '--detach', '--wait')) return null;
  return `${prefix} up`;
}

function isInformational(resolved: ResolvedCommand | null): boolean {
  return resolved !== null && (resolved.args.includes('--help') || resolved.args.includes('--version'));
}

// The three guidance texts are the reference tool's, word for word: agents
// trained on it recognise them and re-send the command the way they say.

/** For `nohup`, `disown` and `setsid`. */
export const SHELL_WRAPPER_GUIDANCE =
  'Foreground command uses shell-level background wrappers (nohup/disown/setsid). ' +
  'Re-send WITHOUT the wrapper as terminal(command="<cmd>", background=true, ' +
  'notify_on_complete=true) so Hermes tracks the process, then run readiness ' +
  'checks and tests in separate commands.';

/** For a background `&`. */
export const AMPERSAND_GUIDANCE =
  "Foreground command uses '&' backgrounding. Re-send WITHOUT the '&' as " +
  'terminal(command="<cmd>", background=true) — add notify_on_complete=true ' +
  'for bounded jobs — then run health checks and tests in follow-up terminal calls.';

/** For servers, watchers and followers. */
export const LONG_LIVED_GUIDANCE =
  'This foreground command appears to start a long-lived server/watch process. ' +
  'Run it with background=true, verify readiness (health endpoint/log signal), ' +
  'then execute tests in a separate command.';

/**
 * The foreground guardrail: returns guidance (the tool's `error` text) when a
 * foreground command would detach or never finish, or null when it may run.
 *
 * Refused: `nohup`, `disown`, `setsid`; a background `&` anywhere (but not
 * `&&`, `|&`, `2>&1`, `>&2`, `&>`); and servers, watchers and followers such
 * as `npm run dev`, `vite`, `uvicorn`, `python -m http.server`,
 * `docker compose up` (without `-d`), `tail -f` and `watch`. Quoted text,
 * backquotes, comments and heredoc bodies are not inspected. A command run
 * with `--help` or `--version` is exempt, as is a `&` that backgrounds one
 * (it exits at once), and so is a command run under `timeout`, which bounds it.
 *
 * When several apply, the answer is the first of wrapper, `&`, server, the
 * order in which the reference tool checks them.
 */
export function findForegroundHazard(command: string): string | null {
  const tokens = lexShell(command);
  let harmlessBackgrounds = 0;
  let wrapper = false;
  let longLived = false;
  for (const simple of splitCommands(tokens)) {
    const resolved = resolveCommand(simple.words);
    if (isInformational(resolved)) {
      if (simple.terminator === '&') harmlessBackgrounds += 1;
      continue;
    }
    if (resolved === null) continue;
    if (DETACHERS.has(resolved.name)) {
      wrapper = true;
      continue;
    }
    if (!resolved.bounded && longRunningLabel(resolved) !== null) longLived = true;
  }
  if (wrapper) return SHELL_WRAPPER_GUIDANCE;
  // Every `&` that ends a simple command yields one entry above; one after a
  // subshell's `)` yields none, so it is never excused.
  const backgrounds = tokens.filter((token) => token.kind === 'op' && token.op === '&').length;
  if (backgrounds > harmlessBackgrounds) return AMPERSAND_GUIDANCE;
  if (longLived) return LONG_LIVED_GUIDANCE;
  return null;
}

/** Refuses a foreground command that would detach or never finish, with {@link findForegroundHazard}'s guidance. */
export const foregroundHazardGuard: TerminalGuard = {
  name: 'foreground-hazard',
  appliesTo: 'foreground',
  beforeRun(call) {
    const hazard = findForegroundHazard(call.command);
    return hazard === null ? undefined : refusal(hazard, 'error');
  },
};
