/**
 * Dangerous-command detection (tool-runtime spec §5): the pure part of the
 * approval flow. It says whether a command is hardline-blocked, needs
 * approval under one of the spec's pattern keys, or is neither; the flow
 * (modes, allowlists, asking the user) is built on top of it.
 */

import { findHardline } from './hardline.js';
import { analyzeCommand, type CommandAnalysis, type NormalizeOptions } from './normalize.js';
import { DANGEROUS_PATTERNS, patternMatches, type DangerousPatternKey, type PatternInput } from './patterns.js';
import { withReadToolPrograms } from './read-tools.js';
import { isVerificationArtifactCleanup } from './temp-cleanup.js';

/** Options for detection; see {@link NormalizeOptions}. */
export type DetectOptions = NormalizeOptions;

/** What detection found. Both fields absent means the command is allowed. */
export interface DangerDetection {
  /** A hardline rule: the command is never run. */
  readonly hardline?: { readonly description: string };
  /** The first dangerous pattern (table order) that matched any variant. */
  readonly dangerous?: { readonly patternKey: DangerousPatternKey; readonly description: string };
}

/** `berth check-command` verdicts. */
export type CommandVerdict = 'allow' | 'approve' | 'block';

/** The result `berth check-command` prints. */
export interface CommandCheck {
  readonly verdict: CommandVerdict;
  /** The allowlist key of the matched pattern; null unless the verdict is `approve`. */
  readonly pattern_key: string | null;
  /** What was found; null when the verdict is `allow`. */
  readonly description: string | null;
}

/**
 * Checks a command: hardline rules first, then the pattern table against each
 * variant of the command. A hardline hit stops there and reports no pattern
 * key, because keys are what allowlists store and nothing may unblock a
 * hardline command.
 */
export function detectDangerousCommand(cmd: string, options: DetectOptions = {}): DangerDetection {
  const { analysis, input } = inspectCommand(cmd, options);
  const hardline = findHardline(analysis, input.written);
  if (hardline !== undefined) return { hardline };
  if (isVerificationArtifactCleanup(cmd)) return {};
  for (const p of DANGEROUS_PATTERNS) {
    if (patternMatches(p, input)) return { dangerous: { patternKey: p.key, description: p.key } };
  }
  return {};
}

/**
 * Parses a command once for both the hardline rules and the pattern table:
 * its variants, plus the programs that read tools would run (`rg --pre=PROG`),
 * which upstream inspects as commands of their own.
 */
export function inspectCommand(cmd: string, options: DetectOptions = {}): { analysis: CommandAnalysis; input: PatternInput } {
  const written = cmd.normalize('NFKC');
  const analysis = withReadToolPrograms(analyzeCommand(cmd, options), written, options);
  const input: PatternInput = {
    variants: [analysis.normalized, ...analysis.commands],
    skeletons: analysis.skeletons,
    written,
  };
  return { analysis, input };
}

/** Collapses a detection into the three-way verdict (block = hardline, approve = pattern). */
export function checkCommand(cmd: string, options: DetectOptions = {}): CommandCheck {
  const { hardline, dangerous } = detectDangerousCommand(cmd, options);
  if (hardline !== undefined) return { verdict: 'block', pattern_key: null, description: hardline.description };
  if (dangerous !== undefined) {
    return { verdict: 'approve', pattern_key: dangerous.patternKey, description: dangerous.description };
  }
  return { verdict: 'allow', pattern_key: null, description: null };
}
