import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { rewriteBackgroundChain } from '../../services/dispatcher/tools/terminal/guards/background-chain.js';

void describe('rewriteBackgroundChain', () => {
  const cases: [input: string, expected: string][] = [
    ['A && B &', 'A && { B & }'],
    ['cd /srv && npm run dev &', 'cd /srv && { npm run dev & }'],
    ['cd app && npm install && npm start &', 'cd app && npm install && { npm start & }'],
    ['make && ./server > out.log 2>&1 &', 'make && { ./server > out.log 2>&1 & }'],
    ['make && ./server | tee log &', 'make && { ./server | tee log & }'],
    ['A && B &   ', 'A && { B & }   '],
    ['A && B &\n', 'A && { B & }\n'],
    ['A && B & # start it', 'A && { B & } # start it'],
    ['A &&\n  B &', 'A && { B & }'],
    ['echo x; A && B &', 'echo x; A && { B & }'],
    ['A && (B; C) &', 'A && { (B; C) & }'],
  ];
  for (const [input, expected] of cases) {
    void it(`rewrites ${JSON.stringify(input)}`, () => {
      assert.equal(rewriteBackgroundChain(input), expected);
    });
  }

  const unchanged = [
    'A && B',
    'B &',
    'A; B &',
    'A || B &',
    'A && B || C &',
    'A && B & C',
    '(A && B &)',
    'A && { B & }',
    'echo "A && B &"',
    "echo 'A && B &'",
    'A && B 2>&1',
    'A && B &> log',
    'echo $(A && B &)',
    'A && B # &',
    '',
  ];
  for (const input of unchanged) {
    void it(`leaves ${JSON.stringify(input)} unchanged`, () => {
      assert.equal(rewriteBackgroundChain(input), input);
    });
  }

  void it('is idempotent', () => {
    const once = rewriteBackgroundChain('cd x && ./serve &');
    assert.equal(rewriteBackgroundChain(once), once);
  });
});
