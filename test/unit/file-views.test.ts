import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { overwriteBlocker, viewAfterRead, viewAfterWrite } from '../../services/dispatcher/tools/file/file-views.js';

const page = (offset: number, endLine: number, extra: { fingerprint?: string; unaltered?: boolean } = {}) => ({
  fingerprint: extra.fingerprint ?? 'f1',
  offset,
  endLine,
  totalLines: 10,
  unaltered: extra.unaltered ?? true,
});

describe('what a task has seen of a file', () => {
  it('grows a view over contiguous pages to a full one; a gap or another content starts over', () => {
    let view = viewAfterRead(undefined, page(1, 4));
    assert.deepEqual(view, { fingerprint: 'f1', coveredTo: 4, full: false });
    view = viewAfterRead(view, page(8, 10));
    assert.deepEqual(view, { fingerprint: 'f1', coveredTo: 4, full: false }, 'a gap adds nothing');
    view = viewAfterRead(view, page(3, 10));
    assert.deepEqual(view, { fingerprint: 'f1', coveredTo: 10, full: true });
    assert.deepEqual(viewAfterRead(view, page(2, 3, { fingerprint: 'f2' })), { fingerprint: 'f2', coveredTo: 0, full: false });
  });

  it('a masked or cut page adds nothing, and a full view stays full', () => {
    assert.deepEqual(viewAfterRead(undefined, page(1, 10, { unaltered: false })), { fingerprint: 'f1', coveredTo: 0, full: false });
    const full = viewAfterWrite('f1');
    assert.equal(viewAfterRead(full, page(1, 2, { unaltered: false })), full);
  });

  it('blocks an unseen or partly seen file, and a changed one with its own reason', () => {
    assert.match(overwriteBlocker(undefined, 'f1', '/w/a') ?? '', /^\/w\/a exists but this task has not seen its full current content/);
    assert.match(overwriteBlocker({ fingerprint: 'f1', coveredTo: 3, full: false }, 'f1', '/w/a') ?? '', /has not seen its full/);
    assert.match(overwriteBlocker(viewAfterWrite('f1'), 'f2', '/w/a') ?? '', /^\/w\/a was modified since you last read it on disk/);
    assert.equal(overwriteBlocker(viewAfterWrite('f1'), 'f1', '/w/a'), undefined);
    assert.equal(overwriteBlocker(viewAfterWrite('f1'), undefined, '/w/a'), undefined, 'content too large to compare');
  });
});
