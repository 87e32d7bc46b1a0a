import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { partialPrefixLength } from '../../services/executor/backends/shared/partial-prefix.js';
import {
  HeadTailBuffer,
  stripAnsi,
  truncateHeadTail,
  truncateOutput,
  truncationNotice,
  utf16Length,
} from '../../services/executor/output.js';

describe('stripAnsi', () => {
  it('removes colours, cursor movement, OSC titles and charset escapes', () => {
    const text =
      '\u001b[1;31mred\u001b[0m plain \u001b[2K\u001b[10;20H' +
      '\u001b]0;window title\u0007\u001b]8;;https://x.example\u001b\\link\u001b]8;;\u001b\\' +
      '\u001b(B\u001b=done\u009b32mc1';
    assert.equal(stripAnsi(text), 'red plain linkdonec1');
  });

  it('leaves text without escapes untouched', () => {
    const text = 'a [31m is not an escape; tabs\tand\nnewlines stay';
    assert.equal(stripAnsi(text), text);
  });
});

describe('truncateOutput', () => {
  it('returns text within the cap unchanged', () => {
    assert.equal(truncateOutput('hello', 5), 'hello');
    assert.equal(truncateOutput('', 10), '');
  });

  it('keeps 40% head and 60% tail with the exact spec notice', () => {
    const text = 'H'.repeat(100) + 'M'.repeat(800) + 'T'.repeat(100);
    const out = truncateOutput(text, 100);
    assert.equal(
      out,
      'H'.repeat(40) + '\n\n... [OUTPUT TRUNCATED - 900 chars omitted out of 1000 total] ...\n\n' + 'T'.repeat(60),
    );
  });

  it('uses plain numbers without thousands separators', () => {
    const out = truncateOutput('x'.repeat(1_234_567), 50_000);
    assert.ok(out.includes('[OUTPUT TRUNCATED - 1184567 chars omitted out of 1234567 total]'));
    assert.equal(out.length, 50_000 + truncationNotice(1_184_567, 1_234_567).length);
  });
});

describe('truncateHeadTail', () => {
  it('matches truncateOutput on the whole text when the middle was never kept', () => {
    const whole = Array.from({ length: 5000 }, (_, i) => String.fromCharCode(97 + (i % 26))).join('');
    const head = whole.slice(0, 700);
    const tail = whole.slice(-900);
    const middle = whole.length - head.length - tail.length;
    assert.equal(truncateHeadTail(head, tail, middle, 1000), truncateOutput(whole, 1000));
  });

  it('falls back to plain truncation when nothing was dropped', () => {
    assert.equal(truncateHeadTail('abc', 'def', 0, 100), 'abcdef');
  });
});

describe('HeadTailBuffer', () => {
  it('keeps everything while under capacity, across chunks', () => {
    const buffer = new HeadTailBuffer(10, 10);
    for (const part of ['hello ', 'wor', 'ld!']) buffer.push(Buffer.from(part));
    assert.equal(buffer.truncated, false);
    assert.equal(buffer.totalBytes, 12);
    assert.deepEqual(buffer.text(), { head: 'hello world!', tail: '', omittedChars: 0 });
  });

  it('keeps only the head and the tail of a flood, and counts what it dropped', () => {
    const buffer = new HeadTailBuffer(100, 200);
    const chunk = Buffer.alloc(64 * 1024, 'x'.charCodeAt(0));
    // 16 MiB through a 300-byte buffer.
    for (let i = 0; i < 256; i++) buffer.push(chunk);
    buffer.push(Buffer.from('THE END'));
    const { head, tail } = buffer.bytes();
    assert.equal(head.length, 100);
    assert.equal(tail.length, 200);
    assert.equal(buffer.totalBytes, 256 * 64 * 1024 + 7);
    const text = buffer.text();
    assert.ok(text.tail.endsWith('THE END'));
    assert.equal(text.head.length + text.omittedChars + text.tail.length, buffer.totalBytes);
  });

  it('renders 1 MB exactly as truncating the whole text would', () => {
    const whole = Array.from({ length: 20_000 }, (_, i) => `line ${i}\n`).join('').slice(0, 1_000_000);
    const buffer = HeadTailBuffer.forMaxChars(50_000);
    for (let i = 0; i < whole.length; i += 4096) buffer.push(Buffer.from(whole.slice(i, i + 4096)));
    const { head, tail, omittedChars } = buffer.text();
    assert.equal(truncateHeadTail(head, tail, omittedChars, 50_000), truncateOutput(whole, 50_000));
  });

  it('never splits a multi-byte character at the gap', () => {
    const buffer = new HeadTailBuffer(4, 5);
    // 'é' is 2 bytes, '😀' 4 bytes (2 UTF-16 units).
    buffer.push(Buffer.from('aaaé😀middle😀éz'));
    const text = buffer.text();
    assert.ok(!text.head.includes('\ufffd') && !text.tail.includes('\ufffd'), JSON.stringify(text));
    assert.equal(text.head.length + text.omittedChars + text.tail.length, 'aaaé😀middle😀éz'.length);
  });
});

describe('utf16Length', () => {
  it('counts UTF-16 units of UTF-8 bytes', () => {
    for (const s of ['', 'abc', 'é', '€', '😀', 'a😀é€z']) assert.equal(utf16Length(Buffer.from(s)), s.length, s);
  });
});

describe('partialPrefixLength', () => {
  it('finds the longest suffix that could start a pattern', () => {
    const p = [Buffer.from('\nMARK')];
    assert.equal(partialPrefixLength(Buffer.from('abc\nMA'), p), 3);
    assert.equal(partialPrefixLength(Buffer.from('abc\n'), p), 1);
    assert.equal(partialPrefixLength(Buffer.from('abc'), p), 0);
    // A complete match is not a partial prefix.
    assert.equal(partialPrefixLength(Buffer.from('x\nMARK'), p), 0);
  });

  it('takes the best over several patterns', () => {
    const p = [Buffer.from('\r\nAB'), Buffer.from('\nAB')];
    assert.equal(partialPrefixLength(Buffer.from('x\r\nA'), p), 3);
    assert.equal(partialPrefixLength(Buffer.from('x\r'), p), 1);
  });
});

describe('dropKillReport', () => {
  it('drops bash\'s report of the job we killed, and only that', async () => {
    const { dropKillReport } = await import('../../services/executor/task-output.js');
    assert.equal(dropKillReport('before\nTerminated\n'), 'before\n');
    assert.equal(dropKillReport('before\nbash: line 7:  4242 Killed                  sleep 30\n'), 'before\n');
    assert.equal(dropKillReport('Terminated'), '');
    assert.equal(dropKillReport('Terminated by user\nmore\n'), 'Terminated by user\nmore\n');
    assert.equal(dropKillReport('job Terminated\n'), 'job Terminated\n');
  });
});
