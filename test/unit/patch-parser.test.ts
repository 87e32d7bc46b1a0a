import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { applyPatch } from '../../services/dispatcher/tools/patch/apply-patch.js';
import { parsePatch } from '../../services/dispatcher/tools/patch/parse-patch.js';
import { normalizePatchPath, patchPaths } from '../../services/dispatcher/tools/patch/patch-paths.js';
import { PatchError, type FileChange, type PatchOperation } from '../../services/dispatcher/tools/patch/patch-types.js';
import { unifiedDiff } from '../../services/dispatcher/tools/patch/unified-diff.js';

/** Parses and applies `patch` to `files`; returns the changes keyed by path. */
function run(patch: string, files: Record<string, string>): Map<string, FileChange> {
  const { operations } = parsePatch(patch);
  const applied = applyPatch(operations, new Map(Object.entries(files)));
  return new Map(applied.changes.map((change) => [change.path, change]));
}

function after(changes: Map<string, FileChange>, path: string): string | undefined {
  return changes.get(path)?.after;
}

function patchError(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof PatchError, `expected PatchError, got ${String(err)}`);
    return err.message;
  }
  assert.fail('expected a PatchError');
}

const source = [
  'import x from "y";',
  '',
  'function a() {',
  '  return 1;',
  '}',
  '',
  'function b() {',
  '  return 2;',
  '}',
  '',
].join('\n');

describe('parsePatch: Begin Patch format', () => {
  it('parses add, move, update with hints, and delete', () => {
    const parsed = parsePatch(
      [
        '*** Begin Patch',
        '*** Add File: ./new/file.txt',
        '+hello',
        '+world',
        '*** Move File: src/a.ts -> src/b.ts',
        '*** Update File: src/b.ts',
        '@@ function a() { @@',
        '-  return 1;',
        '+  return 10;',
        '*** Delete File: old.txt',
        '*** End Patch',
      ].join('\n'),
    );
    assert.equal(parsed.format, 'begin-patch');
    const [add, move, update, del] = parsed.operations as [PatchOperation, PatchOperation, PatchOperation, PatchOperation];
    assert.deepEqual(add, { kind: 'add', path: 'new/file.txt', content: 'hello\nworld\n' });
    assert.deepEqual(move, { kind: 'update', path: 'src/a.ts', moveTo: 'src/b.ts', hunks: [] });
    assert.equal(update.kind === 'update' && update.hunks[0]?.hint, 'function a() {');
    assert.deepEqual(del, { kind: 'delete', path: 'old.txt' });
    assert.deepEqual(patchPaths(parsed.operations), ['new/file.txt', 'src/a.ts', 'src/b.ts', 'old.txt']);
  });

  it('tolerates a missing End Patch, code fences and blank context lines without their space', () => {
    const changes = run(
      [
        '```',
        '*** Begin Patch',
        '*** Update File: a.ts',
        ' function a() {',
        '-  return 1;',
        '+  return 11;',
        ' }',
        '',
        ' function b() {',
        '```',
      ].join('\n'),
      { 'a.ts': source },
    );
    assert.match(after(changes, 'a.ts') ?? '', /return 11;/);
  });

  it('reports every parse error at once with upstream texts, joined by "; "', () => {
    assert.equal(
      patchError(() => parsePatch('*** Begin Patch\n*** Update File: x\n*** Update File:  \n*** Move File: a -> \n*** End Patch')),
      "Parse error: UPDATE 'x': no hunks found; Operation with empty file path; UPDATE '': no hunks found; " +
        "MOVE 'a': missing destination path (expected 'src -> dst')",
    );
    // Python's repr: a path with a quote is shown in double quotes.
    assert.equal(patchError(() => parsePatch("*** Update File: it's.txt")), 'Parse error: UPDATE "it\'s.txt": no hunks found');
    // Berth refuses add lines without "+" (upstream drops them silently), in the same list.
    assert.equal(
      patchError(() => parsePatch('*** Begin Patch\n*** Add File: x\nno plus\n*** Update File: y\n*** End Patch')),
      'Parse error: Patch line 3: every content line of \'*** Add File: x\' must start with \'+\', got: "no plus"; ' +
        "UPDATE 'y': no hunks found",
    );
    assert.match(patchError(() => parsePatch('just some text')), /Unrecognized patch format/);
  });

  it('rejects "*** Move to:" under a file header, telling how to spell the rename', () => {
    assert.equal(
      patchError(() => parsePatch('*** Begin Patch\n*** Update File: src/a.py\n*** Move to: src/b.py\n-x\n+y\n*** End Patch')),
      "Parse error: '*** Move to: src/b.py' is not supported; rename with '*** Move File: src/a.py -> src/b.py' " +
        "and put any edits in their own '*** Update File:' block",
    );
    assert.equal(
      patchError(() => parsePatch('*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch')),
      "Parse error: '*** Move to: b' is not supported; rename with '*** Move File: a -> b' and put any edits in " +
        "their own '*** Update File:' block; UPDATE 'a': no hunks found",
    );
  });

  it('reads unprefixed lines as context, skips "\\ No newline" and ignores lines outside an operation', () => {
    const parsed = parsePatch('*** Begin Patch\nprose first\n*** Update File: x\n-a\nplain\n\\ No newline at end of file\n+b\n*** End Patch');
    const update = parsed.operations[0];
    assert.deepEqual(update?.kind === 'update' && update.hunks[0]?.lines, [
      { kind: '-', text: 'a' },
      { kind: ' ', text: 'plain' },
      { kind: '+', text: 'b' },
    ]);
    // An empty patch parses; validation reports it.
    assert.deepEqual(parsePatch('*** Begin Patch\n*** End Patch').operations, []);
    assert.deepEqual(parsePatch('*** Begin Patch\n*** Rename File: a\n*** End Patch').operations, []);
  });

  it('takes Begin and End markers only as whole lines at column 0', () => {
    const changes = run('*** Begin Patch\n*** Update File: f\n-x\n+*** End Patch\n+ *** End Patch \n*** End Patch\n+ignored', { f: 'x\n' });
    assert.equal(after(changes, 'f'), '*** End Patch\n *** End Patch \n');
    const parsed = parsePatch('  *** Begin Patch\n*** Add File: a\n+1\n*** End Patch\n*** Add File: b\n+2\n');
    assert.deepEqual(parsed.operations.map((op) => op.path), ['a']);
  });

  it('ignores "*** End of File" lines, in Add blocks too', () => {
    const parsed = parsePatch('*** Begin Patch\n*** Add File: a\n+1\n*** End of File\n*** End Patch');
    assert.deepEqual(parsed.operations, [{ kind: 'add', path: 'a', content: '1\n' }]);
    assert.equal(patchError(() => parsePatch('*** Begin Patch\n*** Update File: a\n*** End of File\n*** End Patch')), "Parse error: UPDATE 'a': no hunks found");
  });

  it('normalizes paths and unquotes git-quoted names', () => {
    assert.equal(normalizePatchPath(' ./a/../b/c.ts '), 'b/c.ts');
    assert.equal(normalizePatchPath('"sp\\303\\244ce \\"q\\".txt"'), 'späce "q".txt');
    assert.throws(() => normalizePatchPath('  '), PatchError);
  });
});

describe('applyPatch: Begin Patch format', () => {
  it('applies several hunks and keeps the rest of the file', () => {
    const changes = run(
      [
        '*** Begin Patch',
        '*** Update File: a.ts',
        '@@ function a() {',
        '-  return 1;',
        '+  return 100;',
        '@@ function b() {',
        '-  return 2;',
        '+  return 200;',
        '*** End Patch',
      ].join('\n'),
      { 'a.ts': source },
    );
    assert.equal(after(changes, 'a.ts'), source.replace('return 1;', 'return 100;').replace('return 2;', 'return 200;'));
    assert.equal(changes.get('a.ts')?.kind, 'modify');
  });

  it('uses the @@ hint to pick between identical blocks', () => {
    const text = 'function a() {\n  return 0;\n}\nfunction b() {\n  return 0;\n}\n';
    const changes = run('*** Begin Patch\n*** Update File: f\n@@ function b() {\n-  return 0;\n+  return 9;\n*** End Patch', {
      f: text,
    });
    assert.equal(after(changes, 'f'), 'function a() {\n  return 0;\n}\nfunction b() {\n  return 9;\n}\n');
  });

  it('applies hunks given out of order', () => {
    const changes = run(
      '*** Begin Patch\n*** Update File: f\n-  return 2;\n+  return 20;\n@@\n-  return 1;\n+  return 10;\n*** End Patch',
      { f: source },
    );
    assert.match(after(changes, 'f') ?? '', /return 10;[\s\S]*return 20;/);
  });

  it('matches despite whitespace differences, keeps the file\'s context lines and says so', () => {
    const { operations } = parsePatch(
      '*** Begin Patch\n*** Update File: f\n function a() {\n-return 1;\n+  return 1 + 1;\n*** End Patch',
    );
    const applied = applyPatch(operations, new Map([['f', source]]));
    assert.equal(applied.changes[0]?.after, source.replace('  return 1;', '  return 1 + 1;'));
    assert.match(applied.notes[0] ?? '', /ignoring whitespace/);
  });

  it('appends pure additions at the end of the file, or at End of File', () => {
    const changes = run('*** Begin Patch\n*** Update File: f\n+// tail\n*** End of File\n*** End Patch', { f: 'a\nb\n' });
    assert.equal(after(changes, 'f'), 'a\nb\n// tail\n');
  });

  it('prefers the end of the file for End of File hunks', () => {
    const changes = run('*** Begin Patch\n*** Update File: f\n x\n-y\n+z\n*** End of File\n*** End Patch', { f: 'x\ny\nx\ny\n' });
    assert.equal(after(changes, 'f'), 'x\ny\nx\nz\n');
  });

  it('adds, deletes and moves, reporting the move source', () => {
    const changes = run(
      [
        '*** Begin Patch',
        '*** Add File: c.txt',
        '+new',
        '*** Delete File: d.txt',
        '*** Move File: a.txt -> moved/a.txt',
        '*** Update File: moved/a.txt',
        '-one',
        '+uno',
        '*** End Patch',
      ].join('\n'),
      { 'a.txt': 'one\ntwo\n', 'd.txt': 'bye\n' },
    );
    assert.deepEqual(changes.get('c.txt'), { kind: 'create', path: 'c.txt', after: 'new\n' });
    assert.deepEqual(changes.get('d.txt'), { kind: 'delete', path: 'd.txt', before: 'bye\n' });
    assert.deepEqual(changes.get('a.txt'), { kind: 'delete', path: 'a.txt', before: 'one\ntwo\n' });
    assert.deepEqual(changes.get('moved/a.txt'), { kind: 'create', path: 'moved/a.txt', after: 'uno\ntwo\n', movedFrom: 'a.txt' });
  });

  it('applies two sections on the same file in sequence', () => {
    const changes = run(
      '*** Begin Patch\n*** Update File: f\n-a\n+b\n*** Update File: f\n-b\n+c\n*** End Patch',
      { f: 'a\n' },
    );
    assert.equal(after(changes, 'f'), 'c\n');
  });

  it('rejects the whole patch and lists every problem with upstream texts', () => {
    const message = patchError(() =>
      run(
        [
          '*** Begin Patch',
          '*** Update File: a.ts',
          '-  return 1;',
          '+  return 100;',
          '*** Update File: a.ts',
          '@@ function a() { @@',
          ' function a() {',
          '-  return 42;',
          '+  return 43;',
          '*** Add File: exists.txt',
          '+x',
          '*** Delete File: missing.txt',
          '*** Update File: nope.ts',
          '-a',
          '+b',
          '*** Move File: missing.txt -> exists.txt',
          '*** End Patch',
        ].join('\n'),
        { 'a.ts': source, 'exists.txt': 'here\n' },
      ),
    );
    assert.equal(
      message,
      [
        'Patch validation failed (no files were modified):',
        // The second section sees the first one's edit: sections apply in sequence.
        "  \u2022 a.ts: hunk 1 'function a() {' not found \u2014 Could not find a match for old_string in the file" +
          '\n\nDid you mean one of these sections?\n   1| import x from "y";\n   2| \n   3| function a() {\n   4|   return 100;\n   5| }\n   6| ' +
          '\n---\n   5| }\n   6| \n   7| function b() {\n   8|   return 2;\n   9| }',
        '  \u2022 exists.txt: file already exists \u2014 use Update File, not Add File',
        '  \u2022 missing.txt: file not found for deletion',
        '  \u2022 nope.ts: File not found: nope.ts',
        '  \u2022 missing.txt: source file not found for move',
        '  \u2022 exists.txt: destination already exists \u2014 move would overwrite',
      ].join('\n'),
    );
  });

  it('labels a hunk without a hint "(no hint)" and numbers hunks as written', () => {
    const message = patchError(() => run('*** Begin Patch\n*** Update File: f\n a\n@@\n-zzzzzz\n+y\n*** End Patch', { f: 'a\nb\n' }));
    assert.equal(
      message,
      'Patch validation failed (no files were modified):\n  \u2022 f: hunk 2 (no hint) not found \u2014 Could not find a match for old_string in the file',
    );
  });

  it("checks an addition-only hunk's hint: present once, placed after its line", () => {
    const text = 'def a():\n    pass\ndef b():\n    pass\n';
    assert.equal(
      after(run('*** Begin Patch\n*** Update File: f\n@@ def b @@\n+    # b follows\n*** End Patch', { f: text }), 'f'),
      'def a():\n    pass\ndef b():\n    # b follows\n    pass\n',
    );
    assert.equal(
      patchError(() => run('*** Begin Patch\n*** Update File: f\n@@ def @@\n+x\n@@ class @@\n+y\n*** End Patch', { f: text })),
      'Patch validation failed (no files were modified):\n' +
        "  \u2022 f: addition-only hunk context hint 'def' is ambiguous (2 occurrences)\n" +
        "  \u2022 f: addition-only hunk context hint 'class' not found",
    );
  });

  it('treats context-only hunks as inert, already-applied hunks as no-ops, and refuses a patch with no change', () => {
    const text = 'first line here\nresult = compute_total(items)\n';
    const changes = run(
      '*** Begin Patch\n*** Update File: f\n first line here\n@@\n-result = legacy_total(items)\n+result = compute_total(items)\n*** End Patch',
      { f: text },
    );
    assert.equal(changes.size, 0);
    const noChange = 'Patch validation failed (no files were modified):\n  \u2022 Patch contains no changes (only context lines were provided)';
    assert.equal(patchError(() => run('*** Begin Patch\n*** Update File: f\n first line here\n*** End Patch', { f: text })), noChange);
    assert.equal(patchError(() => run('*** Begin Patch\n*** End Patch', {})), noChange);
  });

  it("validates against the patch's own earlier operations (the overlay)", () => {
    const changes = run('*** Begin Patch\n*** Delete File: a\n*** Add File: a\n+new\n*** Update File: a\n-new\n+newer\n*** End Patch', {
      a: 'old\n',
    });
    assert.deepEqual(changes.get('a'), { kind: 'modify', path: 'a', before: 'old\n', after: 'newer\n' });
    assert.equal(
      patchError(() => run('*** Begin Patch\n*** Delete File: a\n*** Update File: a\n-old\n+x\n*** End Patch', { a: 'old\n' })),
      'Patch validation failed (no files were modified):\n  \u2022 a: file not found',
    );
  });

  it('reports paths it cannot read with their read error', () => {
    const why = "Cannot read 'd': not a regular file (directory, FIFO, socket, or device). Reading it could block indefinitely.";
    const apply = (patch: string): string =>
      patchError(() => applyPatch(parsePatch(patch).operations, new Map([['s', 'x\n']]), new Map([['d', why]])));
    assert.equal(
      apply('*** Begin Patch\n*** Add File: d\n+x\n*** Update File: d\n-a\n+b\n*** Move File: s -> d\n*** End Patch'),
      'Patch validation failed (no files were modified):\n' +
        `  \u2022 d: could not confirm the path is free \u2014 ${why}\n` +
        `  \u2022 d: ${why}\n` +
        `  \u2022 d: could not confirm the path is free \u2014 ${why}`,
    );
  });

  it('preserves CRLF line endings and a missing final newline', () => {
    const changes = run('*** Begin Patch\n*** Update File: f\n a\n-b\n+B\n c\n*** End Patch', { f: 'a\r\nb\r\nc' });
    assert.equal(after(changes, 'f'), 'a\r\nB\r\nc');
  });
});

describe('parsePatch / applyPatch: unified diffs', () => {
  it('applies a git diff with a/ b/ prefixes, several files, creation and deletion', () => {
    const patch = [
      'diff --git a/src/a.ts b/src/a.ts',
      'index 123..456 100644',
      '--- a/src/a.ts',
      '+++ b/src/a.ts',
      '@@ -3,3 +3,3 @@ import x from "y";',
      ' function a() {',
      '-  return 1;',
      '+  return 1000;',
      ' }',
      'diff --git a/new.txt b/new.txt',
      'new file mode 100644',
      '--- /dev/null',
      '+++ b/new.txt',
      '@@ -0,0 +1,2 @@',
      '+first',
      '+second',
      'diff --git a/gone.txt b/gone.txt',
      'deleted file mode 100644',
      '--- a/gone.txt',
      '+++ /dev/null',
      '@@ -1 +0,0 @@',
      '-bye',
      '',
    ].join('\n');
    const parsed = parsePatch(patch);
    assert.equal(parsed.format, 'unified');
    const changes = run(patch, { 'src/a.ts': source, 'gone.txt': 'bye\n' });
    assert.match(after(changes, 'src/a.ts') ?? '', /return 1000;/);
    assert.equal(after(changes, 'new.txt'), 'first\nsecond\n');
    assert.equal(changes.get('gone.txt')?.kind, 'delete');
  });

  it('accepts a plain diff -u with timestamps and wrong line counts', () => {
    const patch = '--- f.txt\t2024-01-01 00:00:00\n+++ f.txt\t2024-01-02 00:00:00\n@@ -1,9 +1,9 @@\n a\n-b\n+B\n c\n';
    assert.equal(after(run(patch, { 'f.txt': 'a\nb\nc\nd\n' }), 'f.txt'), 'a\nB\nc\nd\n');
  });

  it('prefers the occurrence nearest the header line number', () => {
    const text = 'x\ny\nz\nx\ny\nz\n';
    const patch = '--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n x\n-y\n+Y\n z\n';
    assert.equal(after(run(patch, { f: text }), 'f'), 'x\ny\nz\nx\nY\nz\n');
  });

  it('honours "\\ No newline at end of file" on either side', () => {
    const addNewline = '--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n';
    assert.equal(after(run(addNewline, { f: 'a\nb' }), 'f'), 'a\nb\n');
    const dropNewline = '--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n';
    assert.equal(after(run(dropNewline, { f: 'a\nb\n' }), 'f'), 'a\nb');
  });

  it('reads rename from / rename to as a move', () => {
    const patch = 'diff --git a/old.txt b/new.txt\nsimilarity index 100%\nrename from old.txt\nrename to new.txt\n';
    const changes = run(patch, { 'old.txt': 'same\n' });
    assert.equal(changes.get('new.txt')?.movedFrom, 'old.txt');
  });

  it('refuses binary patches', () => {
    assert.match(
      patchError(() => parsePatch('diff --git a/x.png b/x.png\n--- a/x.png\n+++ b/x.png\nGIT binary patch\n')),
      /binary patches are not supported/,
    );
  });
});

describe('parsePatch: V4A headers as upstream spells them', () => {
  it('reads "*** Move File: a -> b" as a pure rename, both ends in headerPaths', () => {
    const parsed = parsePatch('*** Begin Patch\n*** Move File: old/a.py -> new/b.py\n*** End Patch');
    assert.deepEqual(parsed.operations, [{ kind: 'update', path: 'old/a.py', moveTo: 'new/b.py', hunks: [] }]);
    assert.deepEqual(parsed.headerPaths, ['old/a.py', 'new/b.py']);
    const changes = run('*** Begin Patch\n*** Move File: a -> b\n*** End Patch', { a: 'x\n' });
    assert.deepEqual(changes.get('b'), { kind: 'create', path: 'b', after: 'x\n', movedFrom: 'a' });
    assert.equal(changes.get('a')?.kind, 'delete');
  });

  it('moves a file and then updates it at its new path', () => {
    const changes = run('*** Begin Patch\n*** Move File: a -> b\n*** Update File: b\n-x\n+y\n*** End Patch', { a: 'x\n' });
    assert.equal(after(changes, 'b'), 'y\n');
    assert.equal(changes.get('a')?.kind, 'delete');
  });

  it('refuses a Move File onto an existing file', () => {
    assert.match(
      patchError(() => run('*** Begin Patch\n*** Move File: a -> b\n*** End Patch', { a: '1\n', b: '2\n' })),
      /b: destination already exists \u2014 move would overwrite/,
    );
  });

  it('accepts headers without the space after *** (upstream parses them too)', () => {
    const parsed = parsePatch('***Begin Patch\n***Update File: a.txt\n-1\n+2\n***Add File: b.txt\n+b\n***Delete File: c\n***End Patch');
    assert.deepEqual(
      parsed.operations.map((op) => [op.kind, op.path]),
      [
        ['update', 'a.txt'],
        ['add', 'b.txt'],
        ['delete', 'c'],
      ],
    );
  });

  it('keeps header paths as written, so ".." stays visible after normalization', () => {
    const parsed = parsePatch(
      '*** Begin Patch\n*** Update File: src/../../etc/x\n-a\n+b\n*** Add File: ./n.txt\n+n\n' +
        '*** Move File: m -> sub/../../m2\n*** End Patch',
    );
    assert.deepEqual(parsed.headerPaths, ['src/../../etc/x', './n.txt', 'm', 'sub/../../m2']);
    assert.deepEqual(parsePatch('--- a/x/../y\n+++ b/x/../y\n@@ -1 +1 @@\n-a\n+b\n').headerPaths, ['x/../y', 'x/../y']);
  });

  it('falls back to the fuzzy strategies for a hunk the line matcher cannot place, and says so', () => {
    const file = 'intro\nnote = \u201cquoted\u201d \u2014 text\nend\n';
    const patch = '*** Begin Patch\n*** Update File: f.md\n-note = "quoted" -- text\n+note = "quoted" -- more\n*** End Patch';
    const applied = applyPatch(parsePatch(patch).operations, new Map([['f.md', file]]));
    assert.equal(applied.changes[0]?.after, 'intro\nnote = \u201cquoted\u201d \u2014 more\nend\n');
    assert.deepEqual(applied.notes, ["hunk 1 of f.md (patch line 3) was placed by the 'unicode_normalized' fuzzy strategy; check the diff."]);
  });

  it('keeps CRLF through the fuzzy fallback and still fails a hunk nothing resembles', () => {
    const changes = run('*** Begin Patch\n*** Update File: f\n-x  =  1\n+x = 2\n*** End Patch', { f: 'a\r\nx = 1\r\nb\r\n' });
    assert.equal(after(changes, 'f'), 'a\r\nx = 2\r\nb\r\n');
    assert.match(
      patchError(() => run('*** Begin Patch\n*** Update File: f\n-qqqqqq\n+x\n*** End Patch', { f: 'a\nb\n' })),
      /f: hunk 1 \(no hint\) not found \u2014 Could not find a match/,
    );
  });
});

describe('unifiedDiff', () => {
  it('is empty for equal texts', () => {
    assert.equal(unifiedDiff('a\n', 'a\n', { oldLabel: 'a/f', newLabel: 'b/f' }), '');
  });

  it('writes headers, hunk ranges and context', () => {
    const diff = unifiedDiff('1\n2\n3\n4\n5\n6\n7\n8\n9\n', '1\n2\n3\n4\nfive\n6\n7\n8\n9\n', { oldLabel: 'a/f', newLabel: 'b/f' });
    assert.equal(diff, '--- a/f\n+++ b/f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n');
  });

  it('splits distant changes into separate hunks', () => {
    const old = Array.from({ length: 30 }, (_, i) => `${i + 1}`).join('\n') + '\n';
    const changed = old.replace('\n2\n', '\ntwo\n').replace('\n28\n', '\ntwenty-eight\n');
    const diff = unifiedDiff(old, changed, { oldLabel: 'a/f', newLabel: 'b/f', contextLines: 1 });
    assert.deepEqual(diff.split('\n').filter((line) => line.startsWith('@@')), ['@@ -1,3 +1,3 @@', '@@ -27,3 +27,3 @@']);
  });

  it('describes creation, deletion and a missing final newline', () => {
    assert.equal(unifiedDiff('', 'x\n', { oldLabel: '/dev/null', newLabel: 'b/f' }), '--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+x\n');
    assert.equal(unifiedDiff('x\ny\n', '', { oldLabel: 'a/f', newLabel: '/dev/null' }), '--- a/f\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n');
    assert.equal(
      unifiedDiff('a\nb\n', 'a\nb', { oldLabel: 'a/f', newLabel: 'b/f' }),
      '--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n',
    );
  });

  it('round-trips through parsePatch and applyPatch on random edits', () => {
    let seed = 12345;
    const random = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let round = 0; round < 200; round++) {
      const lines = Array.from({ length: 1 + random(40) }, () => `line ${random(8)}`);
      const edited = [...lines];
      for (let edits = random(6); edits > 0; edits--) {
        const at = random(edited.length + 1);
        const action = random(3);
        if (action === 0) edited.splice(at, 1);
        else if (action === 1) edited.splice(at, 0, `new ${random(100)}`);
        else edited.splice(at, 1, `changed ${random(100)}`);
      }
      const before = lines.join('\n') + (random(4) === 0 ? '' : '\n');
      const afterText = edited.length === 0 ? '' : edited.join('\n') + (random(4) === 0 ? '' : '\n');
      const diff = unifiedDiff(before, afterText, { oldLabel: 'a/f', newLabel: 'b/f', contextLines: random(4) });
      if (diff === '') {
        assert.equal(before, afterText);
        continue;
      }
      const result = applyPatch(parsePatch(diff).operations, new Map([['f', before]]));
      const change = result.changes[0];
      assert.equal(change?.after ?? before, afterText, `round ${round}:\n${diff}`);
    }
  });
});
