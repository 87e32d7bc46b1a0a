import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { validateWorkdir } from '../../services/dispatcher/tools/terminal/guards/workdir.js';

void describe('validateWorkdir', () => {
  const accepted = [
    '/home/user/project',
    '/tmp/with space',
    '~/work',
    'C:\\Users\\me',
    '/a/b_c-d.e~f+g@h=i,j',
    '/srv/app:v2',
    '/home/josé/проект',
    '/data/用户/笔记',
    '/tmp/٣',
  ];
  for (const workdir of accepted) {
    void it(`accepts ${JSON.stringify(workdir)}`, () => {
      assert.equal(validateWorkdir(workdir), null);
    });
  }

  void it('accepts the empty string as "no workdir"', () => {
    assert.equal(validateWorkdir(''), null);
  });

  const message = (shown: string) =>
    `Blocked: workdir contains disallowed character ${shown}. Use a simple filesystem path without shell metacharacters.`;
  const rejected: [character: string, shown: string][] = [
    ...[...';|&$`<>(){}[]*?!#%^"'].map((ch): [string, string] => [ch, `'${ch}'`]),
    ["'", `"'"`],
    ['\n', "'\\n'"],
    ['\t', "'\\t'"],
    ['\r', "'\\r'"],
    ['\x1b', "'\\x1b'"],
    ['\x00', "'\\x00'"],
    ['\u00a0', "'\\xa0'"],
    ['\u2028', "'\\u2028'"],
    ['\u202e', "'\\u202e'"],
    ['\x7f', "'\\x7f'"],
  ];
  for (const [character, shown] of rejected) {
    void it(`rejects ${JSON.stringify(character)} shown as ${shown}`, () => {
      assert.equal(validateWorkdir(`/tmp/a${character}b`), message(shown));
    });
  }

  void it('names the first offending character', () => {
    assert.equal(validateWorkdir('/tmp/$(rm -rf ~);x'), message("'$'"));
  });
});
