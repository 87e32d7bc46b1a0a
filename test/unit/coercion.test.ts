import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { coerceArguments } from '../../services/dispatcher/registry/coercion.js';
import type { JsonSchema } from '../../services/dispatcher/registry/tool-types.js';

function schemaOf(properties: Record<string, unknown>): JsonSchema {
  return { type: 'object', properties };
}

void describe('coerceArguments', () => {
  void it('turns "42" into a number for integer and number properties', () => {
    const schema = schemaOf({ n: { type: 'integer' }, x: { type: 'number' } });
    assert.deepEqual(coerceArguments({ n: '42', x: '-2.5' }, schema), { n: 42, x: -2.5 });
  });

  void it('coerces to integer only when the value is integral', () => {
    const schema = schemaOf({ n: { type: 'integer' } });
    assert.deepEqual(coerceArguments({ n: '4.5' }, schema), { n: '4.5' });
    assert.deepEqual(coerceArguments({ n: '4.0' }, schema), { n: 4 });
    assert.deepEqual(coerceArguments({ n: '12345678901234567890' }, schema), { n: '12345678901234567890' });
  });

  void it('leaves non-numeric text unchanged for numeric types', () => {
    const schema = schemaOf({ n: { type: 'number' } });
    for (const text of ['abc', '', '0x10', 'Infinity', '1e400', '4 5']) {
      assert.deepEqual(coerceArguments({ n: text }, schema), { n: text });
    }
  });

  void it('turns "true"/"false" into booleans and leaves other words', () => {
    const schema = schemaOf({ b: { type: 'boolean' } });
    assert.deepEqual(coerceArguments({ b: 'true' }, schema), { b: true });
    assert.deepEqual(coerceArguments({ b: 'false' }, schema), { b: false });
    assert.deepEqual(coerceArguments({ b: ' TRUE ' }, schema), { b: true });
    assert.deepEqual(coerceArguments({ b: 'yes' }, schema), { b: 'yes' });
  });

  void it('parses JSON text into arrays and objects', () => {
    const schema = schemaOf({ list: { type: 'array', items: { type: 'integer' } }, obj: { type: 'object' } });
    assert.deepEqual(coerceArguments({ list: '[1, 2, 3]', obj: '{"a": {"b": 1}}' }, schema), {
      list: [1, 2, 3],
      obj: { a: { b: 1 } },
    });
  });

  void it('leaves invalid JSON for an object type unchanged', () => {
    const schema = schemaOf({ obj: { type: 'object' } });
    assert.deepEqual(coerceArguments({ obj: '{a: 1}' }, schema), { obj: '{a: 1}' });
    assert.deepEqual(coerceArguments({ obj: '[1]' }, schema), { obj: '[1]' });
  });

  void it('turns "null" into null where a type list allows null', () => {
    const schema = schemaOf({ n: { type: ['integer', 'null'] } });
    assert.deepEqual(coerceArguments({ n: 'null' }, schema), { n: null });
  });

  void it('turns "null" into null for nullable and anyOf-with-null schemas', () => {
    const schema = schemaOf({
      a: { type: 'integer', nullable: true },
      b: { anyOf: [{ type: 'integer' }, { type: 'null' }] },
    });
    assert.deepEqual(coerceArguments({ a: 'null', b: 'null' }, schema), { a: null, b: null });
  });

  void it('keeps "null" as text where the schema does not allow null', () => {
    const schema = schemaOf({ n: { type: 'integer' }, list: { type: 'array', items: { type: 'string' } } });
    assert.deepEqual(coerceArguments({ n: 'null', list: 'null' }, schema), { n: 'null', list: 'null' });
  });

  void it('coerces numbers through a type list such as ["integer","null"]', () => {
    const schema = schemaOf({ n: { type: ['integer', 'null'] } });
    assert.deepEqual(coerceArguments({ n: '7' }, schema), { n: 7 });
  });

  void it('prefers integer, then number, for ["integer","number"]', () => {
    const schema = schemaOf({ n: { type: ['integer', 'number'] } });
    assert.deepEqual(coerceArguments({ n: '3' }, schema), { n: 3 });
    assert.deepEqual(coerceArguments({ n: '3.25' }, schema), { n: 3.25 });
  });

  void it('wraps a bare scalar in a one-element array for array types', () => {
    const schema = schemaOf({ urls: { type: 'array', items: { type: 'string' } } });
    assert.deepEqual(coerceArguments({ urls: 'https://example.com' }, schema), { urls: ['https://example.com'] });
  });

  void it('coerces the wrapped element by the items type', () => {
    const schema = schemaOf({ ids: { type: 'array', items: { type: 'integer' } } });
    assert.deepEqual(coerceArguments({ ids: '5' }, schema), { ids: [5] });
    assert.deepEqual(coerceArguments({ ids: 'abc' }, schema), { ids: 'abc' });
  });

  void it('wraps using the array member of an anyOf', () => {
    const schema = schemaOf({ ids: { anyOf: [{ type: 'array', items: { type: 'number' } }, { type: 'null' }] } });
    assert.deepEqual(coerceArguments({ ids: '1.5' }, schema), { ids: [1.5] });
  });

  void it('leaves strings alone when the schema also accepts strings', () => {
    const schema = schemaOf({ v: { type: ['string', 'integer'] }, s: { type: 'string' } });
    assert.deepEqual(coerceArguments({ v: '42', s: 'true' }, schema), { v: '42', s: 'true' });
  });

  void it('touches only strings, and only properties the schema describes', () => {
    const schema = schemaOf({ n: { type: 'integer' } });
    assert.deepEqual(coerceArguments({ n: 5, extra: '42' }, schema), { n: 5, extra: '42' });
    assert.deepEqual(coerceArguments({ n: '1' }, { type: 'object' }), { n: '1' });
    assert.deepEqual(coerceArguments({ n: '1' }, schemaOf({ n: {} })), { n: '1' });
  });

  void it('turns non-object arguments into {}', () => {
    const schema = schemaOf({ n: { type: 'integer' } });
    for (const args of [null, undefined, 'text', 42, true, ['a'], '{"n": 1}']) {
      assert.deepEqual(coerceArguments(args, schema), {});
    }
  });

  void it('does not mutate the input', () => {
    const args = { n: '1' };
    const out = coerceArguments(args, schemaOf({ n: { type: 'integer' } }));
    assert.deepEqual(args, { n: '1' });
    assert.deepEqual(out, { n: 1 });
  });

  void it('keeps a "__proto__" key as data', () => {
    const args = JSON.parse('{"__proto__": {"polluted": true}, "n": "2"}') as unknown;
    const out = coerceArguments(args, schemaOf({ n: { type: 'integer' } }));
    assert.equal(Object.getPrototypeOf(out), Object.prototype);
    assert.equal((out as { polluted?: unknown }).polluted, undefined);
    assert.equal(out['n'], 2);
  });
});
