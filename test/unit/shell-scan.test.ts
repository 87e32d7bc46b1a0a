import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  commandName,
  readHeredocBody,
  redirectOperatorAt,
  skipBalanced,
  skipDoubleQuoted,
  skipOptions,
} from '../../services/common/shell/scan.js';

void describe('skipBalanced', () => {
  void it('counts nested brackets and skips escapes', () => {
    const src = '$(a (b) \\) c) tail';
    assert.equal(src.slice(skipBalanced(src, 2, ')')), ' tail');
  });

  void it('skips quoted closers only when asked to', () => {
    const src = '$(echo ")" x) tail';
    assert.equal(src.slice(skipBalanced(src, 2, ')', true)), ' tail');
    assert.equal(src.slice(skipBalanced(src, 2, ')')), '" x) tail');
  });

  void it('runs to the end of unterminated text', () => {
    assert.equal(skipBalanced('${a', 2, '}'), 3);
    assert.equal(skipDoubleQuoted('"abc', 1), 4);
  });
});

void describe('readHeredocBody', () => {
  const src = 'cat <<EOF\n\tone\r\nEOF\r\nafter';
  const from = src.indexOf('\n') + 1;

  void it('ends at the delimiter line, optionally ignoring a trailing CR', () => {
    const read = readHeredocBody(src, from, { delimiter: 'EOF', stripTabs: false, ignoreCarriageReturn: true });
    assert.deepEqual(read.lines, ['\tone\r']);
    assert.equal(src.slice(read.end), 'after');
    const strict = readHeredocBody(src, from, { delimiter: 'EOF', stripTabs: false, ignoreCarriageReturn: false });
    assert.equal(strict.end, src.length);
  });

  void it('strips leading tabs for <<-', () => {
    const tabbed = 'x\n\tEOF\ny';
    assert.equal(readHeredocBody(tabbed, 2, { delimiter: 'EOF', stripTabs: true, ignoreCarriageReturn: false }).end, 7);
  });
});

void describe('redirectOperatorAt', () => {
  void it('takes the longest operator', () => {
    assert.equal(redirectOperatorAt('<<<x', 0), '<<<');
    assert.equal(redirectOperatorAt('<<-EOF', 0), '<<-');
    assert.equal(redirectOperatorAt('2>&1', 1), '>&');
    assert.equal(redirectOperatorAt('>|f', 0), '>|');
    assert.equal(redirectOperatorAt('<f', 0), '<');
  });
});

void describe('skipOptions and commandName', () => {
  void it('skips options, their values and --', () => {
    const words = ['sudo', '-u', 'root', '-E', '--', 'rm'];
    assert.equal(skipOptions(words, 1, new Set(['-u'])), 5);
    assert.equal(skipOptions(['sudo', '-iu', 'root', 'rm'], 1, new Set(), 'u'), 3);
    assert.equal(skipOptions(['cat', '-', 'x'], 1, new Set()), 1);
  });

  void it('takes the base name of a command word', () => {
    assert.equal(commandName('/usr/bin/grep'), 'grep');
    assert.equal(commandName(undefined), '');
  });
});
