/**
 * Hardline blocks (tool-runtime spec §5): commands that are never run,
 * whatever the approval mode, allowlist or user answer.
 *
 * The rules look only at command positions (the `commands` variants of
 * `analyzeCommand`), so text that merely mentions such a command as data —
 * `gh pr create --title "rm -rf /"`, `echo 'shutdown now'`,
 * `git commit -m "reboot fix"` — is not blocked, while the code handed to
 * `bash -c`, `eval`, `$(...)` or a heredoc fed to a shell is, because the
 * analysis parses those payloads as commands of their own.
 */

import type { CommandAnalysis } from './normalize.js';
import { ARGS, CMD, END, FORK_BOMB } from './patterns.js';

/** A hardline rule: what it blocks and how it is recognised. */
export interface HardlineRule {
  /** Shown to the model in the block message. */
  readonly description: string;
  readonly regex: RegExp;
  /**
   * `command`: matched against command-position variants.
   * `script`: matched against script text with quoted strings blanked, for
   * shapes that are not a single command (the fork bomb).
   */
  readonly scope: 'command' | 'script';
}

/** A hardline hit. */
export interface HardlineMatch {
  readonly description: string;
}

/** Description used when the command nests too deeply to be inspected at all. */
export const UNINSPECTABLE_DESCRIPTION = 'command nested too deeply to inspect';

// rm with a recursive flag anywhere among its arguments, up to a target.
const RM_RECURSIVE = String.raw`(?:\S*/)?rm\s+(?=${ARGS}(?:-[^-\s]*r\S*|--r(?:e(?:c(?:u(?:r(?:s(?:i(?:ve?)?)?)?)?)?)?)?)${END})${ARGS}`;
const ROOT_TARGET = String.raw`/+(?:\.{1,2}/*)?\*?${END}`;
const SYSTEM_TARGET = String.raw`/+(?:home|root|etc|usr|var|bin|sbin|boot|lib(?:32|64|x32)?)/*\*?${END}`;
// `~` (the folded home directory) or any /home/<user> itself.
const HOME_TARGET = String.raw`(?:~|/+home/+[^/\s]+)/*\*?${END}`;

/** Every way of deleting `target` recursively that the rules recognise. */
function recursiveDeleteOf(target: string): string[] {
  return [
    `^${RM_RECURSIVE}${target}`,
    // find [-H|-L|-P] <target> ... -delete | -exec rm
    String.raw`${CMD}find\s+(?:-[hlp]\s+)*${target}\s+${ARGS}(?:-delete|-exec(?:dir)?\s+(?:sudo\s+)?(?:\S*/)?rm)${END}`,
    // cd <target> && rm -rf *   (a pair variant)
    String.raw`${CMD}cd\s+${target}\s+(?:&&|;)\s+${RM_RECURSIVE}(?:\.?/?\*|\.)${END}`,
  ];
}

const RAW_DISK = String.raw`/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk)`;

function rule(description: string, scope: HardlineRule['scope'], ...sources: string[]): HardlineRule {
  const source = sources.length === 1 ? (sources[0] ?? '') : sources.map((s) => `(?:${s})`).join('|');
  return { description, scope, regex: new RegExp(source) };
}

/** The hardline rules, checked in order. */
export const HARDLINE_RULES: readonly HardlineRule[] = [
  rule('recursive delete of the root filesystem', 'command', ...recursiveDeleteOf(ROOT_TARGET)),
  rule('recursive delete of a system directory', 'command', ...recursiveDeleteOf(SYSTEM_TARGET)),
  rule('recursive delete of the home directory', 'command', ...recursiveDeleteOf(HOME_TARGET)),
  rule('format filesystem (mkfs)', 'command', String.raw`${CMD}(?:mkfs(?:\.\S+)?|mke2fs)${END}`),
  rule(
    'write to a raw block device',
    'command',
    String.raw`${CMD}dd\s+${ARGS}of=${RAW_DISK}`,
    String.raw`^(?:\d+|&)?(?:>>?|>&|>\||<>)\s*${RAW_DISK}`,
    String.raw`${CMD}tee\s+${ARGS}${RAW_DISK}`,
  ),
  rule('fork bomb', 'script', FORK_BOMB),
  rule(
    'kill every process (kill -1)',
    'command',
    // The first dash word is the signal; a later -1 is the pid "every process".
    String.raw`${CMD}kill\s+(?:-1\s*$|(?:-s\s+\S+|-n\s+\S+|-[^-\s]\S*|--)\s+${ARGS}-1${END})`,
  ),
  rule(
    'shut down or reboot the machine',
    'command',
    String.raw`${CMD}(?:shutdown|reboot|halt|poweroff)${END}`,
    String.raw`${CMD}(?:tel)?init\s+[06]${END}`,
    String.raw`${CMD}systemctl\s+(?:-\S+\s+)*(?:poweroff|reboot|halt|kexec)${END}`,
  ),
];

/**
 * The first hardline rule the analysed command breaks, if any. A command whose
 * nesting was too deep to inspect is blocked too: what could not be read
 * cannot be shown to be safe.
 */
export function findHardline(analysis: CommandAnalysis): HardlineMatch | undefined {
  for (const { description, regex, scope } of HARDLINE_RULES) {
    const texts = scope === 'command' ? analysis.commands : analysis.skeletons;
    if (texts.some((text) => regex.test(text))) return { description };
  }
  if (analysis.incomplete) return { description: UNINSPECTABLE_DESCRIPTION };
  return undefined;
}

/** The fixed start of every hardline message: `BLOCKED (hardline): DESC.` */
export function hardlinePrefix(description: string): string {
  return `BLOCKED (hardline): ${description}.`;
}

/** The full message returned to the model for a hardline block. */
export function hardlineMessage(description: string): string {
  return `${hardlinePrefix(description)} This command is never run in any approval mode; do not retry it or a variant of it, and ask the user to run it themselves if it is really needed.`;
}
