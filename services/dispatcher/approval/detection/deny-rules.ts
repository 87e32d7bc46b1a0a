/**
 * `approvals.deny` (upstream's user deny rules): fnmatch globs of commands
 * that never run through the agent, checked right after the hardline floor,
 * before yolo, `approvals.mode: off` or the allowlist can let them through.
 * Matching is case-insensitive and runs over the same normalised and
 * command-position variants the pattern table sees, so quoting tricks
 * (`r\m`, `git st""atus`, `sudo env X=1 git push --force`) cannot step
 * around a rule. An `execute_code` script is Python, not shell: its globs are
 * matched against the whole text and against each non-empty line.
 */
import { globToRegExp } from './allowlist.js';
import { inspectCommand } from './detect.js';
import type { NormalizeOptions } from './normalize.js';

/** Upstream's block message for a deny-rule match. */
export function denyRuleMessage(pattern: string): string {
  return (
    `BLOCKED: this command matches the user-defined deny rule '${pattern}' (approvals.deny in config.yaml). ` +
    'It cannot be executed via the agent — not even with --yolo, /yolo, or approvals.mode=off. ' +
    'Do NOT retry or rephrase this command; the user has explicitly forbidden it.'
  );
}

/** The first glob that matches the shell command, or undefined. */
export function matchDenyRule(globs: readonly string[], command: string, options: NormalizeOptions = {}): string | undefined {
  if (globs.length === 0) return undefined;
  const { input } = inspectCommand(command, options);
  const candidates = [...new Set([...input.variants, command].map((v) => v.toLowerCase().trim()))];
  // Variant by variant, then glob by glob, as upstream.
  const compiled = globs.map((glob) => ({ glob, re: globToRegExp(glob.toLowerCase()) }));
  for (const candidate of candidates) {
    const hit = compiled.find(({ re }) => re.test(candidate));
    if (hit !== undefined) return hit.glob;
  }
  return undefined;
}

/** The first glob that matches an execute_code script (whole text, or one of its lines), or undefined. */
export function matchDenyRuleInScript(globs: readonly string[], code: string): string | undefined {
  if (globs.length === 0 || code === '') return undefined;
  const text = code.toLowerCase();
  const lines = text.split(/\r\n|\r|\n/).map((l) => l.trim()).filter((l) => l !== '');
  const candidates = [text, ...lines];
  for (const glob of globs) {
    const re = globToRegExp(glob.toLowerCase());
    if (candidates.some((c) => re.test(c))) return glob;
  }
  return undefined;
}
