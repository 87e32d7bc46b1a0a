/**
 * Error text goes back to the model as a tool result, so anything in it that
 * looks like conversation structure (role tags, tool-call markup, code fences)
 * could be read as instructions. This module neutralises that and bounds the
 * size before the text is wrapped in `{"error": ...}`.
 */

/** Marks text as a tool failure for the model; exactly one leads every sanitised error. */
export const TOOL_ERROR_PREFIX = '[TOOL_ERROR] ';

/**
 * Cap on the sanitised body. The prefix is not counted: the cap bounds what the
 * failing code said, and the fixed-size marker is ours, so a sanitised error is
 * at most `MAX_ERROR_TEXT_CHARS + TOOL_ERROR_PREFIX.length` (2013) characters.
 */
export const MAX_ERROR_TEXT_CHARS = 2000;

const ELLIPSIS = '...';

/**
 * Opening, closing and self-closing role/tool tags, with or without
 * attributes. The name must end at whitespace, `/` or `>` so that ordinary
 * words such as `<user_id>` or `<systemd>` survive.
 */
const ROLE_TAG_PATTERN =
  /<\/?\s*(?:tool_calls?|tool_responses?|tool_results?|tool_use|function_calls?|function_responses?|function_results?|system|assistant|user|human|im_start|im_end)(?=[\s/>])[^<>]*>/gi;

/** Chat-template special tokens such as `<|im_start|>` and `<|endoftext|>`. */
const SPECIAL_TOKEN_PATTERN = /<\|[A-Za-z0-9_]+\|>/g;

/** A code fence with its optional info string (```python, ```json, ```). */
const CODE_FENCE_PATTERN = /```[A-Za-z0-9_+#.-]*/g;

/** Any earlier marker, so nested failures (a tool calling a tool) carry only one. */
const PREFIX_PATTERN = /\[TOOL_ERROR\]\s*/g;

/**
 * Makes error text safe to show the model: strips role/tool tags, chat
 * special tokens and code fences (their content stays), removes any existing
 * `[TOOL_ERROR]` markers, caps the body at 2000 characters (1997 + `...`) and
 * prefixes `[TOOL_ERROR] ` once.
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
      .replace(PREFIX_PATTERN, '');
    if (next === current) return current;
    current = next;
  }
}

function capErrorBody(body: string): string {
  if (body.length <= MAX_ERROR_TEXT_CHARS) return body;
  let end = MAX_ERROR_TEXT_CHARS - ELLIPSIS.length;
  // Do not cut a surrogate pair in half: a lone surrogate is invalid UTF-8 on the wire.
  if (isHighSurrogate(body.charCodeAt(end - 1))) end -= 1;
  return body.slice(0, end) + ELLIPSIS;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}
