/** How the registry shapes what a call returns: error objects, the handler contract, and the result cap. */
import type { Logger } from '../../common/logging.js';
import { boundErrorText, boundJsonErrorResult } from './sanitize.js';

/**
 * Results longer than the cap keep their first `maxChars` characters, then a
 * notice on its own lines:
 *
 *     \n\n... [RESULT TRUNCATED - N chars omitted out of M total] ...
 *
 * The notice comes on top of the cap, so the kept text is exactly the cap and
 * the model learns both that and how much it did not see. The same wording as
 * the terminal's output notice, so models recognise it.
 */
export function capToolResult(result: string, maxChars: number): string {
  if (result.length <= maxChars) return result;
  let end = maxChars;
  // Never split a surrogate pair: a lone surrogate is not valid UTF-8 on the wire.
  const last = result.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end -= 1;
  const omitted = result.length - end;
  return `${result.slice(0, end)}\n\n... [RESULT TRUNCATED - ${omitted} chars omitted out of ${result.length} total] ...`;
}

/**
 * Error results are JSON objects with an `error` field, built by JSON.stringify
 * so any text stays valid JSON; the text is bounded ({@link boundErrorText}).
 */
export function errorResult(message: string, extra: Record<string, string> = {}): string {
  return JSON.stringify({ error: boundErrorText(message), ...extra });
}

/**
 * What the rest of the pipeline gets from a handler: a string with any
 * oversized `error` field bounded. Plugins in plain JavaScript can return
 * anything; hooks, the cap and the model only ever get strings, so anything
 * else becomes the protocol's contract error, naming the tool and the type.
 */
export function normalizeHandlerResult(name: string, result: unknown, logger: Logger): string {
  if (typeof result === 'string') return boundJsonErrorResult(result);
  const resultType = describeType(result);
  logger.error({ tool: name, resultType }, `tool ${name} handler returned unsupported result type: ${resultType}`);
  return errorResult(`Tool handler returned unsupported result type: ${resultType}`, {
    error_type: 'tool_result_contract',
    tool: name,
    result_type: resultType,
  });
}

/**
 * The error's type name for "ErrorType: message". Subclasses that do not set
 * `name` still report their class (`class QuotaError extends Error {}` gives
 * QuotaError); a thrown non-Error is reported as `Error`.
 */
export function errorTypeName(err: unknown): string {
  if (!(err instanceof Error)) return 'Error';
  if (err.name !== '' && err.name !== 'Error') return err.name;
  const className = (err.constructor as { name?: unknown } | undefined)?.name;
  return typeof className === 'string' && className !== '' ? className : 'Error';
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (typeof err === 'string') return err;
  try {
    return JSON.stringify(err) ?? String(err);
  } catch {
    return String(err);
  }
}

/** The JavaScript type of a handler's result, as the contract error names it: `typeof`, except `null` and `array`. */
function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}
