/**
 * Where the file tools refuse to write, as upstream Hermes decides it
 * (`tools/file_tools._check_sensitive_path`, `agent/file_safety.get_write_denied_error`).
 *
 * Two layers with their own texts:
 *
 * - sensitive system paths (`/etc/`, `/boot/`, the docker socket, ...):
 *   `Refusing to write to sensitive system path: ...`;
 * - credential stores (`~/.ssh/`, `~/.aws/`, `~/.netrc`, `/etc/shadow`, ...):
 *   `Write denied: '...' is a protected system/credential file.` (verb
 *   `Delete`/`Move` for those operations).
 *
 * "Home" and symlinks are the task environment's: the target is resolved
 * there (`readlink -f`), so a link planted in the project that points at
 * `~/.ssh/authorized_keys` is refused like the file itself. This is
 * defence in depth, not a boundary: the terminal can still write anywhere the
 * sandbox user can.
 */
import { posix } from 'node:path';
import { shellQuote } from '../../../common/shell/quote.js';
import type { ToolContext } from '../../registry/tool-types.js';
import { HELPER_TIMEOUT_MS } from './common.js';

export type WriteVerb = 'Write' | 'Delete' | 'Move';

/** Prefixes refused by the tool layer (upstream `_SENSITIVE_PATH_PREFIXES`). */
const SENSITIVE_PATH_PREFIXES = ['/etc/', '/boot/', '/usr/lib/systemd/', '/private/etc/', '/private/var/'] as const;
const SENSITIVE_EXACT_PATHS: ReadonlySet<string> = new Set(['/var/run/docker.sock', '/run/docker.sock']);

/** Exact files under the environment's home that are never written. */
const DENIED_HOME_FILES = [
  '.ssh/authorized_keys',
  '.ssh/id_rsa',
  '.ssh/id_ed25519',
  '.hermes/.env',
  '.hermes/.anthropic_oauth.json',
  '.hermes/cache/bws_cache.enc.json',
  '.netrc',
  '.pgpass',
  '.npmrc',
  '.pypirc',
  '.git-credentials',
  // Not in the newest upstream list (older versions had them; the terminal gates them in every version):
  // a shell rc file runs on every login, so writing one is the same persistence risk.
  '.bashrc',
  '.zshrc',
  '.profile',
  '.bash_profile',
  '.zprofile',
] as const;
const DENIED_ABSOLUTE_FILES = ['/etc/sudoers', '/etc/passwd', '/etc/shadow'] as const;
/** Directories under home whose whole content is refused. `~/.ssh/config` included (see the notes). */
const DENIED_HOME_DIRS = ['.ssh', '.aws', '.gnupg', '.kube', '.docker', '.azure', '.config/gh', '.config/gcloud'] as const;
const DENIED_ABSOLUTE_DIRS = ['/etc/sudoers.d', '/etc/systemd'] as const;

/** A write target as the environment sees it. */
export interface WriteTarget {
  /** Absolute path as the executor resolved it (`~` and the cwd applied, symlinks not followed). */
  readonly absPath: string;
  /** `absPath` with symlinks followed; `absPath` when that could not be found out. */
  readonly realPath: string;
  /** The environment's home directory, symlinks followed; undefined when unknown. */
  readonly home: string | undefined;
}

/**
 * Tool-layer refusal for system locations, or undefined. `path` is the
 * argument as given: upstream checks both it (normalised) and the resolved
 * target, and names it in the message.
 */
export function sensitivePathError(path: string, target: WriteTarget): string | undefined {
  const candidates = [target.realPath, target.absPath];
  if (path.startsWith('/')) candidates.push(posix.normalize(path));
  const hit = candidates.some(
    (candidate) =>
      SENSITIVE_PATH_PREFIXES.some((prefix) => candidate.startsWith(prefix)) || SENSITIVE_EXACT_PATHS.has(candidate),
  );
  if (!hit) return undefined;
  return `Refusing to write to sensitive system path: ${path}\nUse the terminal tool with sudo if you need to modify system files.`;
}

/**
 * File-ops-layer refusal for credential stores, or undefined. `displayPath`
 * is the path named in the message (upstream names the resolved absolute
 * path it was given).
 */
export function writeDeniedError(displayPath: string, target: WriteTarget, verb: WriteVerb = 'Write'): string | undefined {
  return isWriteDenied(target) ? `${verb} denied: '${displayPath}' is a protected system/credential file.` : undefined;
}

function isWriteDenied(target: WriteTarget): boolean {
  // Both spellings: a denied file reached through a symlink, and a link whose own name is denied.
  for (const candidate of new Set([target.realPath, target.absPath])) {
    if ((DENIED_ABSOLUTE_FILES as readonly string[]).includes(candidate)) return true;
    if (DENIED_ABSOLUTE_DIRS.some((dir) => candidate.startsWith(`${dir}/`))) return true;
    const home = target.home;
    if (home === undefined || home === '' || home === '/') continue;
    if (!candidate.startsWith(`${home}/`)) continue;
    const inHome = candidate.slice(home.length + 1);
    if ((DENIED_HOME_FILES as readonly string[]).includes(inHome)) return true;
    if (DENIED_HOME_DIRS.some((dir) => inHome.startsWith(`${dir}/`))) return true;
  }
  return false;
}

/** Unit separator: cannot occur in what `$HOME` and `readlink -f` print for sane paths, and never in JSON. */
const FIELD_SEPARATOR = '\u001f';

/**
 * Resolves a target in the task's environment: its home and the target with
 * symlinks followed, in one stateless command. When the command fails (no
 * `readlink -f`), the unresolved path stands; the home is then taken from
 * `~` as the executor resolves it.
 */
export async function resolveWriteTarget(context: ToolContext, absPath: string): Promise<WriteTarget> {
  const command =
    `h=$(cd ~ 2>/dev/null && pwd -P); r=$(readlink -f -- ${shellQuote(absPath)} 2>/dev/null); ` +
    `printf '%s${FIELD_SEPARATOR}%s${FIELD_SEPARATOR}' "$h" "$r"`;
  let home: string | undefined;
  let realPath = absPath;
  try {
    const result = await context.task.exec({
      command,
      stateless: true,
      timeoutMs: HELPER_TIMEOUT_MS,
      maxOutputChars: 20_000,
      signal: context.signal,
    });
    // Only a well-formed answer is used: it comes from the sandbox.
    const match = result.exitCode === 0 ? /^(\/[^\u001f\n]*)?\u001f(\/[^\u001f\n]*)?\u001f$/u.exec(result.output) : null;
    if (match !== null) {
      home = match[1] !== undefined ? posix.normalize(match[1]) : undefined;
      if (match[2] !== undefined) realPath = posix.normalize(match[2]);
    }
  } catch (err) {
    context.logger.debug({ err }, 'could not resolve a write target in the environment');
  }
  if (home === undefined) {
    home = await context.task.stat('~').then(
      (s) => s.absPath,
      () => undefined,
    );
  }
  return { absPath, realPath, home };
}

/**
 * Both checks for one path, sensitive system paths first (as upstream's tool
 * layer runs before its file-ops layer). For patch: call it for every target
 * (the `path` argument and every V4A header path, both ends of a move) before
 * touching any file. Returns the error text, or undefined when the write may go ahead.
 */
export async function checkWriteAllowed(
  context: ToolContext,
  path: string,
  absPath: string,
  verb: WriteVerb = 'Write',
): Promise<string | undefined> {
  const target = await resolveWriteTarget(context, absPath);
  return sensitivePathError(path, target) ?? writeDeniedError(absPath, target, verb);
}
