/** Tool results are JSON text; this reads the ones that are a JSON object. */

/** The object `text` encodes, or undefined when it is not JSON or not an object (an array, a string, ...). */
export function parseJsonObject(text: string): Record<string, unknown> | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined;
}
