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

import { MALFORMED_PAYLOAD_DESCRIPTION } from './malformed.js';
import { malformedGrep } from './malformed-grep.js';
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

/**
 * Description used when the command nests too deeply to be inspected at all:
 * upstream's text for input beyond what its parser inspects.
 */
export const UNINSPECTABLE_DESCRIPTION = 'command parser limit exceeded';

/**
 * `sudo -S` reads the password from stdin: with no password configured for
 * the sandbox (Berth has none), the only use is guessing it.
 */
export const SUDO_STDIN_DESCRIPTION = 'sudo password guessing via stdin (sudo -S)';

// rm with a recursive flag anywhere among its arguments, up to a target.
const RM_RECURSIVE = String.raw`(?:\S*/)?rm\s+(?=${ARGS}(?:-[^-\s]*r\S*|--r(?:e(?:c(?:u(?:r(?:s(?:i(?:ve?)?)?)?)?)?)?)?)${END})${ARGS}`;
const ROOT_TARGET = String.raw`/+(?:\.\.?(?:/+|(?=[\s*]|$)))*\*?${END}`;
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

/** Whole-disk devices (upstream's list), not partitions of a mapped volume alone. */
const RAW_DISK = String.raw`/dev/(?:(?:sd|hd|vd|xvd|nvme|mmcblk|md|dm-|loop|nbd)[a-z0-9]*|r?disk\d|mapper/|disk/by-(?:id|uuid|path|label|partuuid|partlabel)/)`;

function rule(description: string, scope: HardlineRule['scope'], ...sources: string[]): HardlineRule {
  const source = sources.length === 1 ? (sources[0] ?? '') : sources.map((s) => `(?:${s})`).join('|');
  return { description, scope, regex: new RegExp(source) };
}

/** The hardline rules, checked in order; descriptions are upstream's 13, then the sudo -S guard. */
export const HARDLINE_RULES: readonly HardlineRule[] = [
  rule('recursive delete of root filesystem', 'command', ...recursiveDeleteOf(ROOT_TARGET)),
  rule('recursive delete of system directory', 'command', ...recursiveDeleteOf(SYSTEM_TARGET)),
  rule('recursive delete of home directory', 'command', ...recursiveDeleteOf(HOME_TARGET)),
  rule(
    'format filesystem (mkfs)',
    'command',
    String.raw`${CMD}(?:mkfs(?:\.\S+)?|mke2fs)${END}`,
    String.raw`${CMD}(?:mkswap|newfs(?:_\S+)?)\s+${ARGS}${RAW_DISK}`,
    String.raw`${CMD}diskutil\s+(?:\S+\s+)?(?:erasedisk|erasevolume|zerodisk|randomdisk|secureerase|reformat|partitiondisk)${END}`,
  ),
  rule(
    'wipe raw block device',
    'command',
    String.raw`${CMD}wipefs\s+(?=${ARGS}(?:-[^-\s]*a\S*|--all)${END})(?!${ARGS}(?:-[^-\s]*n\S*|--no-act)${END})${ARGS}${RAW_DISK}`,
    String.raw`${CMD}sgdisk\s+(?=${ARGS}(?:-[^-\s]*[zo]\S*|--zap-all|--clear)${END})${ARGS}${RAW_DISK}`,
    String.raw`${CMD}(?:blkdiscard|shred)\s+${ARGS}${RAW_DISK}`,
  ),
  rule('dd to raw block device', 'command', String.raw`${CMD}dd\s+${ARGS}of=${RAW_DISK}`),
  rule(
    'redirect to raw block device',
    'command',
    String.raw`^(?:\d+|&)?(?:>>?|>&|>\||<>)\s*${RAW_DISK}`,
    // `| sudo tee /dev/sdX` is the redirection of choice under sudo.
    String.raw`${CMD}tee\s+${ARGS}${RAW_DISK}`,
  ),
  rule('fork bomb', 'script', FORK_BOMB),
  rule(
    'kill all processes',
    'command',
    // The first dash word is the signal; a later -1 is the pid "every process".
    String.raw`${CMD}kill\s+(?:-1\s*$|(?:-s\s+\S+|-n\s+\S+|-[^-\s]\S*|--)\s+${ARGS}-1${END})`,
  ),
  rule('system shutdown/reboot', 'command', String.raw`${CMD}(?:shutdown|reboot|halt|poweroff)${END}`),
  rule('init 0/6 (shutdown/reboot)', 'command', String.raw`${CMD}init\s+[06]${END}`),
  rule('systemctl poweroff/reboot', 'command', String.raw`${CMD}systemctl\s+(?:-\S+\s+)*(?:poweroff|reboot|halt|kexec)${END}`),
  rule('telinit 0/6 (shutdown/reboot)', 'command', String.raw`${CMD}telinit\s+[06]${END}`),
  // Only as sudo's first option, as upstream: `sudo -u x -S` is the pattern
  // table's `sudo with privilege flag`. Lower-case, so `sudo -s` too.
  rule(SUDO_STDIN_DESCRIPTION, 'command', String.raw`${CMD}sudo\s+-s${END}`),
];

/**
 * The first hardline rule the analysed command breaks, if any. A command whose
 * nesting was too deep to inspect is blocked too: what could not be read
 * cannot be shown to be safe.
 */
export function findHardline(analysis: CommandAnalysis, written: string): HardlineMatch | undefined {
  // Checked first, as upstream: a grep whose words cannot be read could hide a pattern operand.
  const grep = malformedGrep(written);
  if (grep !== undefined) {
    return { description: grep === 'malformed' ? MALFORMED_PAYLOAD_DESCRIPTION : UNINSPECTABLE_DESCRIPTION };
  }
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

/** The full message returned to the model for a hardline block (upstream's text). */
export function hardlineMessage(description: string): string {
  if (description === SUDO_STDIN_DESCRIPTION) {
    // Upstream's text, except its advice to set SUDO_PASSWORD: Berth has no such setting.
    return `BLOCKED: ${description}. Do not pipe passwords to 'sudo -S' — this is a brute-force attack vector. Run the sudo command manually in your own terminal if it is really needed.`;
  }
  const message = `${hardlinePrefix(description)} This command is on the unconditional blocklist and cannot be executed via the agent — not even with --yolo, /yolo, approvals.mode=off, or cron approve mode. If you genuinely need to run it, run it yourself in a terminal outside the agent.`;
  // A block for what could not be read is about the payload's shape, not the operation: say how to get past it.
  if (description === UNINSPECTABLE_DESCRIPTION || description === MALFORMED_PAYLOAD_DESCRIPTION) {
    return (
      message +
      ' RECOVERY: this block fires on oversized/unparseable inline command payloads (heredocs, giant one-liners), not on the operation itself. ' +
      'Write the script to a file with write_file, then run it: terminal(command="bash /path/script.sh") or "python3 /path/script.py". Do not retry inline.'
    );
  }
  return message;
}
