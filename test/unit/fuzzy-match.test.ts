import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fuzzyFindAndReplace, isAlreadyApplied } from '../../services/dispatcher/tools/patch/fuzzy-match.js';
import { formatMatchLocations, noMatchHint } from '../../services/dispatcher/tools/patch/match-messages.js';
import { reindent } from '../../services/dispatcher/tools/patch/match-repairs.js';
import { MATCH_STRATEGIES, findMatches, type MatchStrategy } from '../../services/dispatcher/tools/patch/match-strategies.js';
import { pythonRepr } from '../../services/dispatcher/tools/patch/python-repr.js';
import { similarity } from '../../services/dispatcher/tools/patch/sequence-similarity.js';
import type { Span } from '../../services/dispatcher/tools/patch/span.js';

/** The text each span of `strategy` covers. */
function matched(strategy: MatchStrategy, content: string, pattern: string): string[] {
  return findMatches(strategy, content, pattern).map(([start, end]: Span) => content.slice(start, end));
}

/** Replaces and asserts which strategy decided. */
function replaced(content: string, oldString: string, newString: string, strategy: MatchStrategy, replaceAll = false): string {
  const result = fuzzyFindAndReplace(content, oldString, newString, replaceAll);
  assert.equal(result.error, undefined, result.error);
  assert.equal(result.strategy, strategy);
  return result.content;
}

function errorOf(content: string, oldString: string, newString: string, replaceAll = false): string {
  const result = fuzzyFindAndReplace(content, oldString, newString, replaceAll);
  assert.equal(result.content, content, 'a failed replacement leaves the content alone');
  assert.equal(result.count, 0);
  return result.error ?? assert.fail('expected an error');
}

describe('fuzzyFindAndReplace: pre-checks (upstream texts)', () => {
  it('refuses empty, whitespace-only and identical strings', () => {
    assert.equal(errorOf('abc', '', 'x'), 'old_string cannot be empty');
    assert.equal(errorOf('a  \n b', ' \n ', 'x'), 'old_string is only whitespace — provide non-blank text to match');
    assert.equal(errorOf('abc', 'abc', 'abc'), 'old_string and new_string are identical');
  });

  it('reports a miss with the upstream text', () => {
    assert.equal(errorOf('alpha\nbeta\n', 'gamma', 'delta'), 'Could not find a match for old_string in the file');
  });
});

describe('strategy 1: exact', () => {
  it('finds non-overlapping occurrences, as a global replace would', () => {
    assert.deepEqual(findMatches('exact', 'aaaa', 'aa'), [
      [0, 2],
      [2, 4],
    ]);
    assert.equal(replaced('aaaa', 'aa', 'b', 'exact', true), 'bb');
  });

  it('writes new_string verbatim (no re-indent after an exact match)', () => {
    assert.equal(replaced('  x = 1\n', 'x = 1', 'x = 2\n    y = 3', 'exact'), '  x = 2\n    y = 3\n');
  });
});

describe('strategy 2: line_trimmed', () => {
  it('matches whole lines ignoring surrounding whitespace', () => {
    assert.deepEqual(matched('line_trimmed', 'def f():\n    return 1\n', 'def f():\nreturn 1'), ['def f():\n    return 1']);
    assert.deepEqual(matched('line_trimmed', 'def f():\n    return 1\n', 'def f():\nreturn 2'), []);
  });

  it('re-indents new_string onto the file when the model dropped the indentation', () => {
    const content = 'class A:\n    def f(self):\n        return 1\n';
    const out = replaced(content, 'def f(self):\n    return 1', 'def f(self):\n    return 2', 'line_trimmed');
    assert.equal(out, 'class A:\n    def f(self):\n        return 2\n');
  });
});

describe('strategy 3: whitespace_normalized', () => {
  it('treats runs of spaces and tabs as one space and maps back to the original span', () => {
    assert.deepEqual(matched('whitespace_normalized', 'x  =\t\t1 + 2\n', 'x = 1 + 2'), ['x  =\t\t1 + 2']);
    assert.equal(replaced('a  =   1\nb = 2\n', 'a = 1', 'a = 3', 'whitespace_normalized'), 'a = 3\nb = 2\n');
  });

  it('keeps newlines significant and does not swallow the following word boundary', () => {
    assert.deepEqual(matched('whitespace_normalized', 'x = 1\ny = 2\n', 'x = 1 y = 2'), []);
    assert.deepEqual(matched('whitespace_normalized', 'call(a,  b)  rest', 'call(a, b)'), ['call(a,  b)']);
  });
});

describe('strategy 4: indentation_flexible', () => {
  it('ignores leading whitespace only', () => {
    // Trailing whitespace differs, so line_trimmed would also match; check the strategy on its own.
    assert.deepEqual(matched('indentation_flexible', '\t\tif x:\n\t\t\tgo()\n', 'if x:\n  go()'), ['\t\tif x:\n\t\t\tgo()']);
    assert.deepEqual(matched('indentation_flexible', '  if x:  \n', 'if x:'), []);
  });
});

describe('strategy 5: escape_normalized', () => {
  it('reads \\n, \\t and \\r typed as two characters', () => {
    assert.deepEqual(matched('escape_normalized', 'a\n\tb\n', 'a\\n\\tb'), ['a\n\tb']);
    assert.equal(replaced('first line\nsecond line\n', 'first line\\nsecond line', 'only line', 'escape_normalized'), 'only line\n');
  });

  it('is skipped when old_string has no escapes', () => {
    assert.deepEqual(findMatches('escape_normalized', 'a\nb', 'a\nb'), []);
  });

  it('never rewrites \\n in new_string', () => {
    assert.equal(replaced('x\ny\n', 'x\\ny', 'print("a\\nb")', 'escape_normalized'), 'print("a\\nb")\n');
  });
});

describe('strategy 6: trimmed_boundary', () => {
  it('trims only the first and last lines of the block', () => {
    assert.deepEqual(matched('trimmed_boundary', '  start\n  mid\n  end  \n', 'start\n  mid\nend'), ['  start\n  mid\n  end  ']);
    assert.deepEqual(matched('trimmed_boundary', '  start\n  mid\n  end\n', 'start\nmid\nend'), []);
  });
});

describe('strategy 7: unicode_normalized', () => {
  it('matches typographic characters against their ASCII spelling, mapping spans back through expansions', () => {
    const content = 'say \u201chi\u201d \u2014 ok\u2026 done\n';
    assert.deepEqual(matched('unicode_normalized', content, 'say "hi" -- ok... done'), ['say \u201chi\u201d \u2014 ok\u2026 done']);
    assert.deepEqual(matched('unicode_normalized', 'a\u00a0b\u2009c\u3000d', 'a b c d'), ['a\u00a0b\u2009c\u3000d']);
    assert.deepEqual(matched('unicode_normalized', 'x \u2212 y', 'x - y'), ['x \u2212 y']);
  });

  it('is skipped when neither side has anything to normalize', () => {
    assert.deepEqual(findMatches('unicode_normalized', 'plain', 'plain'), []);
  });

  it('keeps the file\u2019s typographic characters outside the edited part', () => {
    const content = 'title = \u201cHello \u2014 world\u201d\n';
    const out = replaced(content, 'title = "Hello -- world"', 'title = "Hello -- there"', 'unicode_normalized');
    assert.equal(out, 'title = \u201cHello \u2014 there\u201d\n');
  });
});

describe('strategy 8: block_anchor', () => {
  const content = ['function f() {', '  const a = 1;', '  const b = 2;', '  return a + b;', '}', ''].join('\n');

  it('anchors on the first and last lines and accepts a similar middle', () => {
    const pattern = ['function f() {', '  const a = 1;', '  const b = 3;', '  return a + b;', '}'].join('\n');
    assert.deepEqual(matched('block_anchor', content, pattern), [content.slice(0, -1)]);
  });

  it('refuses a dissimilar middle and single-line patterns', () => {
    const pattern = ['function f() {', '  completely different body text here;', '}'].join('\n');
    assert.deepEqual(findMatches('block_anchor', content, pattern), []);
    assert.deepEqual(findMatches('block_anchor', content, 'function f() {'), []);
  });

  it('asks for 70% similarity when several blocks share the anchors', () => {
    const twice = 'begin\nalpha beta\nend\nbegin\nalpha gamma\nend\n';
    // "alpha bxxx" is ~80% like "alpha beta" and ~70% like "alpha gamma": only the first clears 0.7.
    assert.deepEqual(matched('block_anchor', twice, 'begin\nalpha bxxx\nend'), ['begin\nalpha beta\nend']);
  });

  it('refuses replace_all across several approximate matches', () => {
    const twice = 'begin\nalpha beta\nend\nbegin\nalpha beta\nend\n';
    assert.equal(
      errorOf(twice, 'begin\nalpha betx\nend', 'x', true),
      "Found 2 approximate matches via the 'block_anchor' strategy; replace_all only applies to exact matches. " +
        'Provide the precise text (whitespace included) so an exact/line-trimmed match can be made.',
    );
  });
});

describe('strategy 9: context_aware', () => {
  it('accepts a block whose every line is at least 80% similar', () => {
    const content = 'result = compute(alpha)\nprint(result)\n';
    assert.deepEqual(matched('context_aware', content, 'result = compute(alpah)\nprint(resutl)'), [
      'result = compute(alpha)\nprint(result)',
    ]);
  });

  it('rejects a block with one dissimilar line', () => {
    const content = 'result = compute(alpha)\nsomething else entirely\nprint(result)\n';
    assert.deepEqual(findMatches('context_aware', content, 'result = compute(alpha)\nnothing like it\nprint(result)'), []);
  });

  it('is skipped with the similarity strategies when the caller asks for normalizing ones only', () => {
    const content = 'result = compute(alpha)\nprint(result)\n';
    const pattern = 'result = compute(alpah)\nprint(resutl)';
    assert.equal(fuzzyFindAndReplace(content, pattern, 'x', false).strategy, 'context_aware');
    const strict = fuzzyFindAndReplace(content, pattern, 'x', false, { similarity: false });
    assert.equal(strict.error, 'Could not find a match for old_string in the file');
  });

  it('is the last strategy tried', () => {
    assert.equal(MATCH_STRATEGIES[MATCH_STRATEGIES.length - 1], 'context_aware');
    assert.deepEqual([...MATCH_STRATEGIES], [
      'exact',
      'line_trimmed',
      'whitespace_normalized',
      'indentation_flexible',
      'escape_normalized',
      'trimmed_boundary',
      'unicode_normalized',
      'block_anchor',
      'context_aware',
    ]);
  });
});

describe('ambiguity', () => {
  it('lists up to five match lines with the upstream wording', () => {
    const content = Array.from({ length: 7 }, (_, i) => `  value = compute(${i})`).join('\n');
    assert.equal(
      errorOf(content, 'value = compute(', 'v('),
      'Found 7 matches for old_string. Provide more context to make it unique, or use replace_all=True. Matches:\n' +
        '  L1: value = compute(0)\n  L2: value = compute(1)\n  L3: value = compute(2)\n  L4: value = compute(3)\n' +
        '  L5: value = compute(4)\n  ... and 2 more',
    );
  });

  it('cuts long snippets to 77 characters and an ellipsis', () => {
    const long = `x = "${'y'.repeat(100)}"`;
    assert.equal(formatMatchLocations(`${long}\n${long}\n`, [[0, 1]]), `  L1: ${long.slice(0, 77)}...`);
  });
});

describe('guard: escape drift', () => {
  it("refuses \\' in both strings when the matched file text has a plain quote", () => {
    const content = "    msg = 'it's fine'\n";
    assert.equal(
      errorOf(content, "msg = 'it\\'s fine'\n", "msg = 'it\\'s great'\n"),
      "Escape-drift detected: old_string and new_string contain the literal sequence \"\\\\'\" but the matched " +
        'region of the file does not. This is almost always a tool-call serialization artifact where an apostrophe ' +
        'or quote got prefixed with a spurious backslash. Re-read the file with read_file and pass ' +
        'old_string/new_string without backslash-escaping "\'" characters.',
    );
  });

  it('accepts the sequence when the file really contains it', () => {
    const content = '  s = "say \\"hi\\""\n';
    assert.equal(replaced(content, 's  =  "say \\"hi\\""', 's = "say \\"yo\\""', 'whitespace_normalized'), '  s = "say \\"yo\\""\n');
  });

  it('does not run after an exact match', () => {
    assert.equal(replaced("a = 'x'\n", "a = 'x'", "a = 'it\\'s'", 'exact'), "a = 'it\\'s'\n");
  });
});

describe('guard: rogue indentation', () => {
  it('refuses new_string lines deeper than old_string when nothing opens a block', () => {
    assert.equal(
      errorOf('  a = 1\n  b = 2\n', 'a = 1\nb = 2', 'a = 1\n      b = 3'),
      "Suspicious indentation in new_string: 1 line(s) indented deeper than old_string's max indent (0 spaces), " +
        "but neither old_string nor new_string opens a nesting block (':', '{', '('). Likely a model indent typo — " +
        "check the indentation of: 'b = 3'",
    );
  });

  it('runs after an exact match too when asked (a CRLF file matched as LF: upstream never matches it exactly)', () => {
    const content = 'a = 1\nb = 2\n';
    assert.equal(fuzzyFindAndReplace(content, 'a = 1\nb = 2', 'a = 1\n    b = 3', false).strategy, 'exact');
    const guarded = fuzzyFindAndReplace(content, 'a = 1\nb = 2', 'a = 1\n    b = 3', false, { guardsOnExact: true });
    assert.deepEqual([guarded.count, guarded.content], [0, content]);
    assert.match(guarded.error ?? '', /^Suspicious indentation in new_string: 1 line\(s\) indented deeper/);
  });

  it('allows deeper lines when a line opens a block', () => {
    const out = replaced('  if x:\n    go()\n', 'if x:\ngo()', 'if x:\n    go()\n    stop()', 'line_trimmed');
    assert.equal(out, '  if x:\n      go()\n      stop()\n');
  });
});

describe('repairs after a non-exact match', () => {
  it('turns \\t into a tab only when the matched region has a real tab', () => {
    assert.equal(replaced('\tcall(a,\tb)\n', 'call(a, b)', 'call(a,\\tc)', 'whitespace_normalized'), '\tcall(a,\tc)\n');
    assert.equal(replaced('  call(a,  b)\n', 'call(a, b)', 'call(a,\\tc)', 'whitespace_normalized'), '  call(a,\\tc)\n');
  });

  it('re-indents relative to the first non-blank line and anchors dedented lines at the file base', () => {
    assert.equal(reindent('    a\n    b', '  a\n  b', '  a\n    c\nd\n\n  e'), '    a\n      c\n    d\n\n    e');
    assert.equal(reindent('  a', '  a', 'x\n  y'), 'x\n  y', 'same base indent: untouched');
  });
});

describe('isAlreadyApplied', () => {
  it('is true when new_string (8+ chars) is present and old_string is gone', () => {
    assert.equal(isAlreadyApplied('return compute(2)\n', 'return compute(1)', 'return compute(2)'), true);
  });

  it('is false for short targets, half-applied edits and absent text', () => {
    assert.equal(isAlreadyApplied('x = 2\n', 'x = 1', 'x = 2'), false);
    assert.equal(isAlreadyApplied('return compute(1)\nreturn compute(2)\n', 'return compute(1)', 'return compute(2)'), false);
    assert.equal(isAlreadyApplied('nothing here\n', 'return compute(1)', 'return compute(2)'), false);
  });
});

describe('noMatchHint', () => {
  const content = 'def alpha():\n    return 1\n\ndef beta():\n    return 2\n';

  it('shows numbered excerpts around the most similar lines', () => {
    const hint = noMatchHint('Could not find a match for old_string in the file', 'def alpah():\n    return 9', content);
    assert.match(hint, /^\n\nDid you mean one of these sections\?\n {3}1\| def alpha\(\):\n {3}2\|     return 1\n/);
  });

  it('diagnoses a whitespace-only difference', () => {
    const hint = noMatchHint('Could not find a match for old_string in the file', '\treturn 1\nx', content);
    assert.match(hint, /Whitespace difference detected \(→ = tab, · = space\):\n {2}file has: ····return 1\n {2}you sent: →return 1\n/);
  });

  it('stays empty for other errors and for text nothing resembles', () => {
    assert.equal(noMatchHint('Found 2 matches for old_string.', 'def alpha', content), '');
    assert.equal(noMatchHint('Could not find a match for old_string in the file', 'zzzzzzzzzzzz', content), '');
  });
});

describe('similarity and repr helpers', () => {
  it('agrees with difflib.SequenceMatcher.ratio on ordinary text', () => {
    // Values from Python 3: SequenceMatcher(None, a, b).ratio().
    assert.equal(similarity('def foo(x):', 'def foo(y):').toFixed(4), '0.9091');
    assert.equal(similarity('hello world', 'world hello').toFixed(4), '0.4545');
    assert.equal(similarity('return a + b', '  return a+b').toFixed(4), '0.8333');
    assert.equal(similarity('', ''), 1);
  });

  it('quotes like Python repr', () => {
    assert.equal(pythonRepr("\\'"), `"\\\\'"`);
    assert.equal(pythonRepr('"'), `'"'`);
    assert.equal(pythonRepr("src/it's.py"), `"src/it's.py"`);
    assert.equal(pythonRepr('a\tb'), "'a\\tb'");
  });
});
