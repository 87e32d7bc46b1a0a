/**
 * The disk meter's reading of `du` output, which comes out of the sandbox:
 * only one "BYTES<TAB>PATH" line per measured directory is accepted.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseDu } from '../../services/executor/backends/docker/disk-meter.js';

const DIRS = ['/workspace', '/home/sandbox'];

describe('parseDu', () => {
  it('adds up one line per directory', () => {
    assert.equal(parseDu('4096\t/workspace\n83890176\t/home/sandbox\n', DIRS), 4096 + 83_890_176);
  });

  it('refuses output that is not du measuring exactly those directories', () => {
    for (const text of [
      '4096\t/workspace\n',
      '4096\t/workspace\n4096\t/workspace\n',
      '4096\t/workspace\n1\t/home/sandbox\n1\t/etc\n',
      '-5\t/workspace\n1\t/home/sandbox\n',
      'lots\t/workspace\n1\t/home/sandbox\n',
      '',
    ]) {
      assert.throws(() => parseDu(text, DIRS), /du/, JSON.stringify(text));
    }
  });
});
