/**
 * Finding `old_string` in a file the way Hermes' `patch` tool does: nine
 * matching strategies, strictest first, with the guards and repairs that
 * run after a non-exact match. Pure, so every rule is unit-tested without a
 * task environment.
 *
 * Models copy text from memory and through JSON, so their `old_string`
 * drifts from the file in predictable ways: indentation, runs of spaces,
 * escaped newlines, typographic quotes. Each strategy forgives one kind of
 * drift. The first strategy that finds anything decides; its matches are
 * spans of the original text, so what is replaced is exactly the file's own
 * region.
 *
 * Error texts are the upstream ones (they are interface: models and client
 * code react to them).
 */
import { applySpans, escapeDriftError, preserveUnicode, regionsText, rogueIndentError, unescapeControls } from './match-repairs.js';
import { formatMatchLocations } from './match-messages.js';
import { findMatches, MATCH_STRATEGIES, type MatchStrategy } from './match-strategies.js';

/** The result of {@link fuzzyFindAndReplace}; `error` set means nothing was replaced. */
export interface FuzzyReplaceResult {
  readonly content: string;
  readonly count: number;
  readonly strategy?: MatchStrategy;
  readonly error?: string;
}

/** Options of {@link fuzzyFindAndReplace}. */
export interface FuzzyOptions {
  /**
   * false skips `block_anchor` and `context_aware`, which accept text that
   * only resembles old_string; the normalizing strategies still run.
   * Default true (upstream's replace mode).
   */
  readonly similarity?: boolean;
  /**
   * Run the escape-drift and indentation guards after an `exact` match too.
   * For a CRLF file matched as LF: upstream's exact match fails there on a
   * multi-line old_string and a later strategy matches, so its guards run.
   * Default false.
   */
  readonly guardsOnExact?: boolean;
}

export const NO_MATCH_ERROR = 'Could not find a match for old_string in the file';

/** Strategies that accept a region only resembling old_string: never used to replace several places at once. */
const SIMILARITY_STRATEGIES: ReadonlySet<MatchStrategy> = new Set(['block_anchor', 'context_aware']);

/**
 * Replaces `oldString` in `content`, trying each strategy in order.
 * Without `replaceAll` the match must be unique.
 */
export function fuzzyFindAndReplace(
  content: string,
  oldString: string,
  newString: string,
  replaceAll: boolean,
  options: FuzzyOptions = {},
): FuzzyReplaceResult {
  const fail = (error: string): FuzzyReplaceResult => ({ content, count: 0, error });
  if (oldString === '') return fail('old_string cannot be empty');
  if (oldString.trim() === '') return fail('old_string is only whitespace — provide non-blank text to match');
  if (oldString === newString) return fail('old_string and new_string are identical');

  for (const strategy of MATCH_STRATEGIES) {
    if (options.similarity === false && SIMILARITY_STRATEGIES.has(strategy)) continue;
    const matches = findMatches(strategy, content, oldString);
    if (matches.length === 0) continue;
    if (matches.length > 1 && !replaceAll) {
      return fail(
        `Found ${matches.length} matches for old_string. Provide more context to make it unique, ` +
          `or use replace_all=True. Matches:\n${formatMatchLocations(content, matches)}`,
      );
    }
    if (matches.length > 1 && SIMILARITY_STRATEGIES.has(strategy)) {
      return fail(
        `Found ${matches.length} approximate matches via the '${strategy}' strategy; replace_all only applies to ` +
          'exact matches. Provide the precise text (whitespace included) so an exact/line-trimmed match can be made.',
      );
    }
    if (strategy !== 'exact' || options.guardsOnExact === true) {
      const guard = escapeDriftError(content, matches, oldString, newString) ?? rogueIndentError(oldString, newString);
      if (guard !== undefined) return fail(guard);
    }
    let replacement = unescapeControls(newString, regionsText(content, matches));
    if (strategy === 'unicode_normalized') replacement = preserveUnicode(content, matches, oldString, replacement);
    const reindentFrom = strategy === 'exact' ? undefined : oldString;
    return { content: applySpans(content, matches, replacement, reindentFrom), count: matches.length, strategy };
  }
  return fail(NO_MATCH_ERROR);
}

/**
 * Whether the edit is already in the file, so a re-sent patch can be
 * answered with a success-shaped no-op. Conservative: `newString` must be
 * substantial (8+ characters without surrounding whitespace), present
 * verbatim, and `oldString` gone (unless the two are equal).
 */
export function isAlreadyApplied(content: string, oldString: string, newString: string): boolean {
  if (newString.trim().length < 8 || !content.includes(newString)) return false;
  return oldString === newString || !content.includes(oldString);
}
