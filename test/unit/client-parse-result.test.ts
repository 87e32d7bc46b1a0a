import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseResult } from '../../services/client/session.js';

test('a result with a hint after its JSON object parses to the object', () => {
  const text = '{"total_count":60,"truncated":true}\n\n[Hint: Results truncated. Use offset=50 to see more, or narrow with a more specific pattern or file_glob.]';
  assert.deepEqual(parseResult(text), { total_count: 60, truncated: true });
});

test('plain JSON parses, and text that is not JSON stays text', () => {
  assert.deepEqual(parseResult('{"output":"hi"}'), { output: 'hi' });
  assert.equal(parseResult('just words\n\n[Hint: x]'), 'just words\n\n[Hint: x]');
  assert.equal(parseResult('plain'), 'plain');
});
