/**
 * Python's name for the type of a decoded JSON value, as the tools' argument
 * errors print it (upstream's `type(x).__name__`). The protocol's agents were
 * written against a Python implementation and match on these names (`got
 * int`, `got NoneType`), so a missing argument reads `NoneType` too. JSON
 * cannot tell 1.0 from 1, so a whole number is always `int`.
 */
export function pythonTypeName(value: unknown): string {
  if (value === null || value === undefined) return 'NoneType';
  if (typeof value === 'boolean') return 'bool';
  if (typeof value === 'number') return Number.isInteger(value) ? 'int' : 'float';
  if (typeof value === 'bigint') return 'int';
  if (typeof value === 'string') return 'str';
  if (Array.isArray(value)) return 'list';
  if (typeof value === 'object') return 'dict';
  return typeof value;
}
