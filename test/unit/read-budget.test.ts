import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { applyCharBudget, countConflictBlocks, truncateToCharBudget } from '../../services/dispatcher/tools/file/read-budget.js';

describe('read_file character budget (upstream _apply_char_budget)', () => {
  it('keeps whole lines that fit, newlines counted, in code points', () => {
    assert.deepEqual(truncateToCharBudget('1|ab\n2|cd\n3|ef', 9), { trimmed: '1|ab\n2|cd', linesKept: 2 });
    assert.deepEqual(truncateToCharBudget('1|😀😀\n2|x', 5), { trimmed: '1|😀😀', linesKept: 1 });
  });

  it('clamps a first line that alone is over the budget, and says its rest cannot be paged to', () => {
    const result: Record<string, unknown> = { content: `7|${'w'.repeat(20)}\n8|x`, total_lines: 9, truncated: false };
    assert.equal(applyCharBudget(result, 7, 10), true);
    assert.deepEqual(result, {
      content: '7|wwwwwwww',
      total_lines: 9,
      truncated: true,
      truncated_by: 'bytes',
      next_offset: 8,
      hint:
        'Output truncated at the 10-char read budget after 1 line(s) (showing lines 7-7 of 9). Use offset=8 to ' +
        'continue. Note: the first line alone exceeded the budget and was clamped mid-line; its remainder is not ' +
        'retrievable via offset.',
      truncated_lines: true,
    });
  });

  it('leaves a result within the budget alone', () => {
    const result = { content: '1|short', total_lines: 1 };
    assert.equal(applyCharBudget(result, 1, 100), false);
    assert.deepEqual(result, { content: '1|short', total_lines: 1 });
  });
});

describe('merge-conflict blocks (upstream count_conflict_blocks)', () => {
  it('counts balanced pairs of markers at line starts, with the space git writes', () => {
    assert.equal(countConflictBlocks('1|<<<<<<< HEAD\n2|a\n3|=======\n4|b\n5|>>>>>>> x'), 1);
    assert.equal(countConflictBlocks('1|<<<<<<< A\n2|<<<<<<< B\n3|>>>>>>> C'), 1);
    assert.equal(countConflictBlocks('1|>>>>>>> C'), 0);
    assert.equal(countConflictBlocks('1|x <<<<<<< A\n2|>>>>>>> B'), 0);
  });
});
