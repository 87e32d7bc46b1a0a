/**
 * Error text goes back to the model as a tool result, so anything in it that
 * looks like conversation structure (role tags, tool-call markup, code fences,
 * CDATA sections) could be read as instructions. This module neutralises that
 * and bounds the size before the text is wrapped in `{"error": ...}`.
 *
 * Two bounds, as in the Hermes tool protocol: the sanitiser caps the body at
 * 2,048 characters (2,045 + `...`) before prefixing `[TOOL_ERROR] `, and every
 * error result is bounded again at 2,048 characters + `… [truncated]` when it
 * is built ({@link boundErrorText}), so a sanitised error that the prefix
 * pushed over the bound loses its tail to the second marker, exactly as there.
 */

/** Marks text as a tool failure for the model; exactly one leads every sanitised error. */
export const TOOL_ERROR_PREFIX = '[TOOL_ERROR] ';

/**
 * Cap on the sanitised body, `...` included. The prefix is not counted: the
 * sanitiser returns at most `MAX_ERROR_TEXT_CHARS + TOOL_ERROR_PREFIX.length`
 * (2061) characters; {@link boundErrorText} then applies to the whole text.
 */
export const MAX_ERROR_TEXT_CHARS = 2048;

/** Bound on the `error` text of any error result, before the truncation marker. */
export const MAX_TOOL_ERROR_CHARS = 2048;

/** What replaces the cut tail of an error text longer than {@link MAX_TOOL_ERROR_CHARS}. */
export const TOOL_ERROR_TRUNCATION_MARKER = '\u2026 [truncated]';

const ELLIPSIS = '...';

/**
 * Opening, closing and self-closing role/tool tags, with or without
 * attributes. The name must end at whitespace, `/` or `>` so that ordinary
 * words such as `<user_id>` or `<systemd>` survive.
 */
const ROLE_TAG_PATTERN =
  /<\/?\s*(?:tool_calls?|tool_responses?|tool_results?|tool_use|function_calls?|function_responses?|function_results?|result|response|output|input|system|assistant|user|human|im_start|im_end)(?=[\s/>])[^<>]*>/gi;

/** Chat-template special tokens such as `<|im_start|>` and `<|endoftext|>`. */
const SPECIAL_TOKEN_PATTERN = /<\|[A-Za-z0-9_]+\|>/g;

/** A code fence with its optional info string (```python, ```json, ```). */
const CODE_FENCE_PATTERN = /```[A-Za-z0-9_+#.-]*/g;

/** A whole CDATA section, content included (markup smuggled inside would be read as such). */
const CDATA_PATTERN = /<!\[CDATA\[[\s\S]*?\]\]>/g;

/** Any earlier marker, so nested failures (a tool calling a tool) carry only one. */
const PREFIX_PATTERN = /\[TOOL_ERROR\]\s*/g;

/**
 * Makes error text safe to show the model: strips role/tool tags, chat
 * special tokens and code fences (their content stays) and CDATA sections
 * (content and all), removes any existing `[TOOL_ERROR]` markers, caps the
 * body at 2048 characters (2045 + `...`) and prefixes `[TOOL_ERROR] ` once.
 * Empty text gives just the prefix.
 */
export function sanitizeErrorText(text: string): string {
  const body = stripUntilStable(text).trim();
  return TOOL_ERROR_PREFIX + capErrorBody(body);
}

/**
 * Removal can splice two fragments into a new match (`<sys<user>tem>`), so
 * repeat until nothing changes. Each pass only shortens the text, so this ends.
 */
function stripUntilStable(text: string): string {
  let current = text;
  for (;;) {
    const next = current
      .replace(ROLE_TAG_PATTERN, '')
      .replace(SPECIAL_TOKEN_PATTERN, '')
      .replace(CODE_FENCE_PATTERN, '')
      .replace(CDATA_PATTERN, '')
      .replace(PREFIX_PATTERN, '');
    if (next === current) return current;
    current = next;
  }
}

function capErrorBody(body: string): string {
  if (body.length <= MAX_ERROR_TEXT_CHARS) return body;
  return cutAt(body, MAX_ERROR_TEXT_CHARS - ELLIPSIS.length) + ELLIPSIS;
}

/**
 * Bounds the text of an error result: longer than 2048 characters keeps the
 * first 2048 and appends `… [truncated]`. Applied to every error result the
 * registry builds, so a runaway exception message cannot fill the model's
 * context (and pile up across retries).
 */
export function boundErrorText(text: string): string {
  if (text.length <= MAX_TOOL_ERROR_CHARS) return text;
  return cutAt(text, MAX_TOOL_ERROR_CHARS) + TOOL_ERROR_TRUNCATION_MARKER;
}

/**
 * A handler's result whose `error` field is longer than the bound gets that
 * field bounded ({@link boundErrorText}); other fields and other results are
 * returned as they are. Handlers that build `{"error": ...}` themselves skip
 * the bound of the registry's own error results, so it is applied again at
 * the dispatch boundary.
 */
export function boundJsonErrorResult(result: string): string {
  if (result.length <= MAX_TOOL_ERROR_CHARS || !result.includes('"error"')) return result;
  let payload: unknown;
  try {
    payload = JSON.parse(result);
  } catch {
    return result;
  }
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) return result;
  const error = (payload as { error?: unknown }).error;
  if (typeof error !== 'string' || error.length <= MAX_TOOL_ERROR_CHARS) return result;
  return JSON.stringify({ ...payload, error: boundErrorText(error) });
}

/** The first `end` UTF-16 units, one fewer if that would split a surrogate pair (invalid UTF-8 on the wire). */
function cutAt(text: string, end: number): string {
  return text.slice(0, isHighSurrogate(text.charCodeAt(end - 1)) ? end - 1 : end);
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}
