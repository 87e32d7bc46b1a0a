import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { shellQuote } from '../../services/common/shell/quote.js';

/** What a real shell makes of the quoted word: the proof that matters. */
function throughShell(shell: string, value: string): string {
  return execFileSync(shell, ['-c', `printf '%s' ${shellQuote(value)}`], { encoding: 'utf8' });
}

const tricky = [
  '',
  'plain',
  'with space',
  "it's",
  "''",
  "'leading and trailing'",
  '$HOME `id` $(id) ${x}',
  'glob * ? [a-z] ~ ~root',
  'semi; amp & pipe | redirect > < ',
  'back\\slash \\n \\\'',
  'new\nline\ttab',
  '-n',
  '--',
  'ünïcödé 🚀',
  '"double" quotes',
  '!history !!',
];

describe('shellQuote', () => {
  it('wraps in single quotes and escapes embedded ones', () => {
    assert.equal(shellQuote('abc'), "'abc'");
    assert.equal(shellQuote(''), "''");
    assert.equal(shellQuote("it's"), "'it'\\''s'");
  });

  it('round-trips every byte through bash', () => {
    for (const value of tricky) assert.equal(throughShell('bash', value), value, JSON.stringify(value));
  });

  it('round-trips through plain sh as well', () => {
    for (const value of tricky) assert.equal(throughShell('sh', value), value, JSON.stringify(value));
  });

  it('keeps a word with spaces as one argument', () => {
    const count = execFileSync('bash', ['-c', `set -- ${shellQuote('a b  c')} ${shellQuote('')}; echo $#`], {
      encoding: 'utf8',
    });
    assert.equal(count.trim(), '2');
  });

  it('refuses NUL, which no shell word can carry', () => {
    assert.throws(() => shellQuote('a\0b'), RangeError);
  });
});
