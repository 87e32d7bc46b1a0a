import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseResult } from '../../services/client/session.js';

test('a truncated search parses to its object: the hint inside it (today) or after it (older servers)', () => {
  const hint = 'Results truncated. Use offset=50 to see more, or narrow with a more specific pattern or file_glob.';
  assert.deepEqual(parseResult(JSON.stringify({ total_count: 60, truncated: true, _hint: hint })), {
    total_count: 60,
    truncated: true,
    _hint: hint,
  });
  const older = `{"total_count":60,"truncated":true}\n\n[Hint: ${hint}]`;
  assert.deepEqual(parseResult(older), { total_count: 60, truncated: true });
});

test('plain JSON parses, and text that is not JSON stays text', () => {
  assert.deepEqual(parseResult('{"output":"hi"}'), { output: 'hi' });
  assert.equal(parseResult('just words\n\n[Hint: x]'), 'just words\n\n[Hint: x]');
  assert.equal(parseResult('plain'), 'plain');
});
