/**
 * The patch tool's result shapes and texts against real files, through
 * LocalTaskClientDouble: what a model written for upstream Hermes reads.
 */
import assert from 'node:assert/strict';
import { readFile, writeFile, mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskClient } from '../../services/common/task-client.js';
import { patchRegistration } from '../../services/dispatcher/tools/patch/patch-tool.js';
import type { ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import { LocalTaskClientDouble } from '../fixtures/local-task-client.js';

type Result = Record<string, unknown>;

const NOT_FOUND = 'Could not find a match for old_string in the file';
const NOT_FOUND_HINT =
  'old_string not found. Use read_file to verify the current content, or search_files to locate the text.';

let taskCounter = 0;

class PatchHarness {
  private readonly context: ToolContext;

  constructor(readonly task: LocalTaskClientDouble) {
    this.context = {
      tenant: 'tenant-test',
      // Failure counts are per task: each harness is its own task.
      taskId: `patch-task-${++taskCounter}`,
      sessionId: 'session-test',
      task,
      signal: new AbortController().signal,
      logger: silentLogger(),
    };
  }

  async call(args: Record<string, unknown>): Promise<Result> {
    return JSON.parse(await patchRegistration().handler(args, this.context)) as Result;
  }

  path(relative: string): string {
    return join(this.task.root, relative);
  }

  async write(relative: string, content: string): Promise<void> {
    await mkdir(dirname(this.path(relative)), { recursive: true });
    await writeFile(this.path(relative), content);
  }

  async read(relative: string): Promise<string> {
    return readFile(this.path(relative), 'utf8');
  }
}

async function harness(): Promise<PatchHarness> {
  return new PatchHarness(await LocalTaskClientDouble.create('berth-patch-tool-'));
}

describe('patch replace mode: upstream result shapes', () => {
  let h: PatchHarness;
  before(async () => {
    h = await harness();
  });
  after(async () => h.task.dispose());

  it('escalates the hint from the third consecutive miss on one file, and a success resets the count', async () => {
    await h.write('a.py', 'alpha = 1\n');
    const miss = { path: 'a.py', old_string: 'qqqqqqqq', new_string: 'x' };
    assert.deepEqual(await h.call(miss), { success: false, error: NOT_FOUND, _hint: NOT_FOUND_HINT });
    assert.deepEqual(await h.call(miss), { success: false, error: NOT_FOUND, _hint: NOT_FOUND_HINT });
    const third = await h.call(miss);
    assert.deepEqual(third, {
      success: false,
      error: NOT_FOUND,
      _hint:
        "This is failure #3 patching 'a.py'. Stop retrying with variations of the same old_string. Either: " +
        '(1) re-read the file fresh to verify current content, (2) use a longer / more unique old_string with ' +
        'surrounding context lines, or (3) use write_file to replace the entire file if the targeted region is ' +
        'hard to anchor.',
    });
    assert.match(String((await h.call(miss))._hint), /^This is failure #4 patching 'a\.py'\./);

    // Another file keeps its own count; another task starts from zero.
    await h.write('b.py', 'beta = 2\n');
    assert.equal((await h.call({ ...miss, path: 'b.py' }))._hint, NOT_FOUND_HINT);
    const other = new PatchHarness(h.task);
    assert.equal((await other.call(miss))._hint, NOT_FOUND_HINT);

    assert.equal((await h.call({ path: 'a.py', old_string: 'alpha = 1', new_string: 'alpha = 2' })).success, true);
    assert.equal((await h.call(miss))._hint, NOT_FOUND_HINT);
  });

  it('adds a "Did you mean" excerpt instead of the hint when similar lines exist', async () => {
    await h.write('m.py', 'def compute(x):\n    return x * 2\n');
    const result = await h.call({ path: 'm.py', old_string: 'def compute(value, extra):\n    return value + extra', new_string: 'z' });
    assert.deepEqual(Object.keys(result), ['success', 'error']);
    assert.equal(
      result.error,
      `${NOT_FOUND}\n\nDid you mean one of these sections?\n   1| def compute(x):\n   2|     return x * 2`,
    );
  });

  it('answers a re-sent edit with the no_change shape and writes nothing', async () => {
    await h.write('done.py', 'value = compute(2)\n');
    const result = await h.call({ path: 'done.py', old_string: 'result = legacy_call(1, 2, 3)', new_string: 'value = compute(2)' });
    assert.deepEqual(result, {
      success: true,
      no_change: true,
      note:
        `File already contains the target text — the edit appears to be already applied to ${h.path('done.py')}. ` +
        'No write performed; do not re-send this patch.',
      files_modified: [h.path('done.py')],
      resolved_path: h.path('done.py'),
    });
    assert.equal(await h.read('done.py'), 'value = compute(2)\n');
  });

  it('returns upstream texts for bad strings, in the failure shape', async () => {
    await h.write('s.py', 'x = 1\n');
    assert.deepEqual(await h.call({ path: 's.py', old_string: '', new_string: 'y' }), {
      success: false,
      error: 'old_string cannot be empty',
    });
    assert.deepEqual(await h.call({ path: 's.py', old_string: '  \n', new_string: 'y' }), {
      success: false,
      error: 'old_string is only whitespace — provide non-blank text to match',
    });
    assert.deepEqual(await h.call({ path: 's.py', old_string: 'x = 1', new_string: 'x = 1' }), {
      success: false,
      error: 'old_string and new_string are identical',
    });
  });

  it('returns upstream texts for missing arguments as plain errors', async () => {
    assert.deepEqual(await h.call({ mode: 'replace', old_string: 'a', new_string: 'b' }), { error: 'path required' });
    assert.deepEqual(await h.call({ mode: 'replace', path: 'x.py', old_string: 'a' }), {
      error: 'old_string and new_string required',
    });
    assert.deepEqual(await h.call({ mode: 'replace', path: 'x.py', new_string: 'b' }), {
      error: 'old_string and new_string required',
    });
    assert.deepEqual(await h.call({ mode: 'merge' }), { error: 'Unknown mode: merge' });
  });

  it('refuses escape drift and rogue indentation without touching the file', async () => {
    await h.write('q.py', "    msg = 'it's'\n    n = 1\n");
    const drift = await h.call({ path: 'q.py', old_string: "msg = 'it\\'s'", new_string: "msg = 'it\\'s ok'" });
    assert.equal(drift.success, false);
    assert.match(String(drift.error), /^Escape-drift detected: /);
    const indent = await h.call({ path: 'q.py', old_string: "msg = 'it's'\nn = 1", new_string: "msg = 'x'\n        n = 2" });
    assert.equal(indent.success, false);
    assert.match(String(indent.error), /^Suspicious indentation in new_string: 1 line\(s\)/);
    assert.equal(await h.read('q.py'), "    msg = 'it's'\n    n = 1\n");
  });

  it('keeps a BOM and CRLF line endings, matching LF-typed strings', async () => {
    await h.write('w.txt', '\uFEFFone\r\ntwo\r\nthree\r\n');
    const result = await h.call({ path: 'w.txt', old_string: 'one\ntwo', new_string: 'uno\ndos' });
    assert.equal(result.success, true, JSON.stringify(result));
    assert.equal(await h.read('w.txt'), '\uFEFFuno\r\ndos\r\nthree\r\n');
    // The diff is of the text, without the BOM and with the file's lines.
    assert.equal(result.diff, '--- a/w.txt\n+++ b/w.txt\n@@ -1,3 +1,3 @@\n-one\n-two\n+uno\n+dos\n three\n');
  });

  it('refuses an indentation typo in a CRLF file as upstream does, and takes the same edit in an LF file', async () => {
    const typo = { old_string: 'a = 1\nb = 2', new_string: 'a = 1\n        b = 3' };
    await h.write('crlf.py', 'a = 1\r\nb = 2\r\n');
    const refused = await h.call({ path: 'crlf.py', ...typo });
    assert.deepEqual(refused, {
      success: false,
      error:
        "Suspicious indentation in new_string: 1 line(s) indented deeper than old_string's max indent (0 spaces), " +
        "but neither old_string nor new_string opens a nesting block (':', '{', '('). Likely a model indent typo — " +
        "check the indentation of: 'b = 3'",
    });
    assert.equal(await h.read('crlf.py'), 'a = 1\r\nb = 2\r\n');
    // Upstream matches these exactly (LF file; one line; the model's own CRLF), so no guard.
    await h.write('lf.py', 'a = 1\nb = 2\n');
    assert.equal((await h.call({ path: 'lf.py', ...typo })).success, true);
    assert.equal((await h.call({ path: 'crlf.py', old_string: 'b = 2', new_string: '        b = 3' })).success, true);
    await h.write('crlf2.py', 'a = 1\r\nb = 2\r\n');
    assert.equal((await h.call({ path: 'crlf2.py', old_string: 'a = 1\r\nb = 2', new_string: 'a = 1\r\n        b = 3' })).success, true);
  });

  it('keeps typographic characters the edit did not touch', async () => {
    await h.write('t.md', 'He said \u201cwait\u201d \u2014 then left.\n');
    const result = await h.call({ path: 't.md', old_string: 'He said "wait" -- then left.', new_string: 'He said "wait" -- then stayed.' });
    assert.equal(result.success, true, JSON.stringify(result));
    assert.equal(await h.read('t.md'), 'He said \u201cwait\u201d \u2014 then stayed.\n');
  });
});

describe('patch patch mode: V4A headers and shapes', () => {
  let h: PatchHarness;
  before(async () => {
    h = await harness();
  });
  after(async () => h.task.dispose());

  it('refuses ".." in any header with upstream text before reading or writing anything', async () => {
    await h.write('keep.txt', 'keep\n');
    const cases: [string, string][] = [
      ['*** Update File: src/../../etc/passwd\n-a\n+b', 'src/../../etc/passwd'],
      ['*** Add File: ../escape.txt\n+x', '../escape.txt'],
      ['*** Delete File: a/../../keep.txt', 'a/../../keep.txt'],
      ['*** Move File: keep.txt -> ../out.txt', '../out.txt'],
    ];
    for (const [body, bad] of cases) {
      const result = await h.call({ mode: 'patch', patch: `*** Begin Patch\n${body}\n*** End Patch` });
      assert.deepEqual(result, {
        error:
          `V4A patch header contains '..' traversal: '${bad}'. Use the agent's cwd-relative path (no '..') or an ` +
          "absolute path in '*** Update File:' / '*** Add File:' / '*** Delete File:' / '*** Move File:' headers.",
      });
    }
    assert.equal(await h.read('keep.txt'), 'keep\n');
  });

  it('refuses credential stores and system paths in any header or path, as write_file does', async () => {
    await h.write('notes.txt', 'a\n');
    const denied = (abs: string): string => `Write denied: '${abs}' is a protected system/credential file.`;
    assert.deepEqual(
      await h.call({ mode: 'patch', patch: '*** Begin Patch\n*** Add File: .ssh/authorized_keys\n+ssh-ed25519 AAAA\n*** End Patch' }),
      { error: denied(h.path('.ssh/authorized_keys')) },
    );
    assert.deepEqual(
      await h.call({ mode: 'patch', patch: '*** Begin Patch\n*** Move File: notes.txt -> .aws/credentials\n*** End Patch' }),
      { error: denied(h.path('.aws/credentials')) },
    );
    assert.deepEqual(await h.call({ mode: 'replace', path: '/etc/hosts', old_string: 'a', new_string: 'b' }), {
      error: 'Refusing to write to sensitive system path: /etc/hosts\nUse the terminal tool with sudo if you need to modify system files.',
    });
    assert.equal(await h.read('notes.txt'), 'a\n');
    await assert.rejects(h.read('.ssh/authorized_keys'));
    await assert.rejects(h.read('.aws/credentials'));
  });

  it('moves a file with "*** Move File: a -> b", naming both ends', async () => {
    await h.write('old/name.py', 'x = 1\n');
    const result = await h.call({ mode: 'patch', patch: '*** Begin Patch\n*** Move File: old/name.py -> new/name.py\n*** End Patch' });
    assert.deepEqual(result, {
      success: true,
      diff: '# Moved: old/name.py -> new/name.py',
      files_modified: [h.path('old/name.py'), h.path('new/name.py')],
    });
    assert.equal(await h.read('new/name.py'), 'x = 1\n');
    await assert.rejects(h.read('old/name.py'));
  });

  it('gives resolved_path when the patch names one file, and keeps its BOM and CRLF', async () => {
    await h.write('win.txt', '\uFEFFa\r\nb\r\nc\r\n');
    const result = await h.call({ patch: '*** Begin Patch\n*** Update File: win.txt\n a\n-b\n+B\n*** End Patch' });
    assert.deepEqual(Object.keys(result), ['success', 'diff', 'files_modified', 'resolved_path']);
    assert.deepEqual(result.files_modified, [h.path('win.txt')]);
    assert.equal(result.resolved_path, h.path('win.txt'));
    assert.equal(await h.read('win.txt'), '\uFEFFa\r\nB\r\nc\r\n');
  });

  it('runs the indentation guard on a fuzzily placed hunk of a CRLF file, as upstream does for every hunk', async () => {
    const patch = '*** Begin Patch\n*** Update File: {f}\n-a\n-b\n+a\n+        c\n*** End Patch';
    await h.write('hunk-crlf.txt', 'prefix a\r\nb\r\n');
    const refused = await h.call({ patch: patch.replace('{f}', 'hunk-crlf.txt') });
    assert.equal(refused.success, false);
    assert.match(String(refused.error), /Suspicious indentation in new_string: 1 line\(s\)/);
    assert.equal(await h.read('hunk-crlf.txt'), 'prefix a\r\nb\r\n');
    await h.write('hunk-lf.txt', 'prefix a\nb\n');
    assert.equal((await h.call({ patch: patch.replace('{f}', 'hunk-lf.txt') })).success, true);
    assert.equal(await h.read('hunk-lf.txt'), 'prefix a\n        c\n');
  });

  it('refuses the Codex "*** Move to:" spelling with upstream\'s text, even with ".." in it', async () => {
    await h.write('c.txt', 'one\n');
    for (const to of ['d.txt', 'x/../../y.txt']) {
      const result = await h.call({ mode: 'patch', patch: `*** Begin Patch\n*** Update File: c.txt\n*** Move to: ${to}\n-one\n+two\n*** End Patch` });
      assert.deepEqual(result, {
        success: false,
        error:
          `Failed to parse patch: Parse error: '*** Move to: ${to}' is not supported; rename with ` +
          `'*** Move File: c.txt -> ${to}' and put any edits in their own '*** Update File:' block`,
      });
    }
    assert.equal(await h.read('c.txt'), 'one\n');
    await assert.rejects(h.read('d.txt'));
  });

  it('reports a hunk that does not apply as a validation failure with the not-found hint, writing nothing', async () => {
    await h.write('e.txt', 'alpha\n');
    await h.write('f.txt', 'one\n');
    const patch = '*** Begin Patch\n*** Update File: f.txt\n-one\n+uno\n*** Update File: e.txt\n@@ top @@\n-qqqqqqqq\n+ten\n*** End Patch';
    assert.deepEqual(await h.call({ mode: 'patch', patch }), {
      success: false,
      error:
        'Patch validation failed (no files were modified):\n' +
        "  \u2022 e.txt: hunk 1 'top' not found \u2014 Could not find a match for old_string in the file",
      _hint: NOT_FOUND_HINT,
    });
    assert.equal(await h.read('f.txt'), 'one\n');
    assert.equal(await h.read('e.txt'), 'alpha\n');
  });

  it('checks Add, Delete and Move targets before writing, with upstream texts', async () => {
    await h.write('here.txt', 'here\n');
    await h.write('src.txt', 'src\n');
    await mkdir(h.path('adir'), { recursive: true });
    await h.write('blob.dat', '\u0000\u0001binary');
    const patch = [
      '*** Begin Patch',
      '*** Update File: src.txt',
      '-src',
      '+changed',
      '*** Add File: here.txt',
      '+clobber',
      '*** Delete File: gone.txt',
      '*** Move File: nowhere.txt -> fresh.txt',
      '*** Move File: src.txt -> here.txt',
      '*** Add File: adir',
      '+x',
      '*** Update File: blob.dat',
      '-a',
      '+b',
      '*** Update File: absent.txt',
      '-a',
      '+b',
      '*** End Patch',
    ].join('\n');
    assert.deepEqual(await h.call({ mode: 'patch', patch }), {
      success: false,
      error: [
        'Patch validation failed (no files were modified):',
        '  \u2022 here.txt: file already exists \u2014 use Update File, not Add File',
        '  \u2022 gone.txt: file not found for deletion',
        '  \u2022 nowhere.txt: source file not found for move',
        '  \u2022 here.txt: destination already exists \u2014 move would overwrite',
        "  \u2022 adir: could not confirm the path is free \u2014 Cannot read 'adir': not a regular file (directory, FIFO, socket, " +
          'or device). Reading it could block indefinitely.',
        '  \u2022 blob.dat: Binary file (unknown binary, 8 bytes) \u2014 cannot display as text.',
        '  \u2022 absent.txt: File not found: absent.txt',
      ].join('\n'),
    });
    assert.equal(await h.read('src.txt'), 'src\n');
    assert.equal(await h.read('here.txt'), 'here\n');
    await assert.rejects(h.read('fresh.txt'));
  });

  it('refuses a patch of context lines only', async () => {
    await h.write('ctx.txt', 'same\n');
    assert.deepEqual(await h.call({ mode: 'patch', patch: '*** Begin Patch\n*** Update File: ctx.txt\n same\n*** End Patch' }), {
      success: false,
      error: 'Patch validation failed (no files were modified):\n  \u2022 Patch contains no changes (only context lines were provided)',
    });
  });

  it('answers with upstream\'s success shape: lists per operation as the headers name them, diff per file', async () => {
    await h.write('upd.txt', 'a\nb\n');
    await h.write('del.txt', 'bye\n');
    await h.write('empty.txt', '');
    const patch = [
      '*** Begin Patch',
      '*** Update File: upd.txt',
      ' a',
      '-b',
      '+B',
      '*** Add File: ./made/new.txt',
      '+one',
      '+two',
      '*** Delete File: del.txt',
      '*** Delete File: empty.txt',
      '*** End Patch',
    ].join('\n');
    const result = await h.call({ mode: 'patch', patch });
    assert.deepEqual(result, {
      success: true,
      diff:
        '--- a/upd.txt\n+++ b/upd.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n' +
        '\n--- /dev/null\n+++ b/made/new.txt\n+one\n+two' +
        '\n--- a/del.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n' +
        '\n# Deleted: empty.txt',
      files_modified: ['upd.txt', 'made/new.txt', 'del.txt', 'empty.txt'].map((p) => h.path(p)),
      files_created: ['made/new.txt'],
      files_deleted: ['del.txt', 'empty.txt'],
    });
    assert.equal(await h.read('made/new.txt'), 'one\ntwo\n');
  });

  it('prefixes parse errors with "Failed to parse patch: Parse error:"', async () => {
    const result = await h.call({ mode: 'patch', patch: '*** Begin Patch\n*** Add File: z.txt\nno plus sign\n*** Update File: y.txt\n*** End Patch' });
    assert.deepEqual(result, {
      success: false,
      error:
        "Failed to parse patch: Parse error: Patch line 3: every content line of '*** Add File: z.txt' must start with '+', " +
        'got: "no plus sign"; UPDATE \'y.txt\': no hunks found',
    });
  });

  it('refuses a patch that would leave a JSON, YAML or TOML file unparseable, changing no file', async () => {
    await h.write('pkg.json', '{\n  "name": "x",\n  "version": "1.0.0"\n}\n');
    await h.write('notes.txt', 'old\n');
    const patch = [
      '*** Begin Patch',
      '*** Update File: notes.txt',
      '-old',
      '+new',
      '*** Update File: pkg.json',
      '-  "version": "1.0.0"',
      '+  "version": "1.0.1",',
      '*** Add File: conf.toml',
      '+name = ',
      '*** End Patch',
    ].join('\n');
    const result = await h.call({ mode: 'patch', patch });
    assert.deepEqual(result, {
      success: false,
      error:
        'Patch validation failed (no files were modified):\n' +
        "  \u2022 Failed to update pkg.json: Refusing to write 'pkg.json': candidate content fails .json syntax validation " +
        '(SyntaxError: Expected double-quoted property name in JSON at position 39). The file was NOT created or ' +
        'modified. Fix the content and retry.\n' +
        "  \u2022 Failed to add conf.toml: Refusing to write 'conf.toml': candidate content fails .toml syntax validation " +
        '(TomlError: Invalid TOML document: invalid value\n\n1:  name = \n           ^). The file was NOT created or ' +
        'modified. Fix the content and retry.',
    });
    assert.equal(await h.read('notes.txt'), 'old\n');
    assert.match(await h.read('pkg.json'), /"1\.0\.0"\n\}/);
  });

  it('refuses a replace-mode edit that breaks a YAML file, through write_file\'s text', async () => {
    await h.write('compose.yaml', 'services:\n  web:\n    image: nginx\n');
    const result = await h.call({ path: 'compose.yaml', old_string: '    image: nginx', new_string: '    image: "nginx' });
    assert.deepEqual(Object.keys(result), ['success', 'error']);
    assert.equal(result.success, false);
    assert.match(
      String(result.error),
      new RegExp(
        `^Failed to write changes: Refusing to write '${h.path('compose.yaml').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}': ` +
          'candidate content fails \\.yaml syntax validation \\(YAMLParseError: Missing closing "quote[\\s\\S]*\\)\\. ' +
          'The file was NOT created or modified\\. Fix the content and retry\\.$',
      ),
    );
    assert.equal(await h.read('compose.yaml'), 'services:\n  web:\n    image: nginx\n');
  });

  it('moves an unparseable JSON file as it is, as upstream mv does', async () => {
    await h.write('broken.json', '{oops\n');
    const result = await h.call({ mode: 'patch', patch: '*** Begin Patch\n*** Move File: broken.json -> kept.json\n*** End Patch' });
    assert.equal(result.success, true, JSON.stringify(result));
    assert.equal(await h.read('kept.json'), '{oops\n');
  });

  it('re-reads every file it writes and reports one that did not persist', async () => {
    const inner = await LocalTaskClientDouble.create('berth-patch-lossy-');
    // An executor that loses the last byte of writes to b.txt.
    const lossy: TaskClient = {
      exec: (request) => inner.exec(request),
      readFile: (p) => inner.readFile(p),
      writeFile: (p, content) =>
        inner.writeFile(p, p.endsWith('b.txt') && typeof content === 'string' ? content.slice(0, -1) : content),
      stat: (p) => inner.stat(p),
      startBackground: inner.startBackground.bind(inner),
      process: inner.process.bind(inner),
    };
    const context: ToolContext = {
      tenant: 'tenant-test',
      taskId: 'patch-lossy',
      sessionId: 'session-test',
      task: lossy,
      signal: new AbortController().signal,
      logger: silentLogger(),
    };
    await writeFile(join(inner.root, 'a.txt'), 'one\n');
    await writeFile(join(inner.root, 'b.txt'), 'two\n');
    const patch = '*** Begin Patch\n*** Update File: a.txt\n-one\n+uno\n*** Update File: b.txt\n-two\n+dos\n*** End Patch';
    const result = JSON.parse(await patchRegistration().handler({ mode: 'patch', patch }, context)) as Result;
    assert.deepEqual(result, {
      success: false,
      diff: '--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+uno\n',
      files_modified: ['a.txt'],
      error:
        'Apply phase failed (state may be inconsistent \u2014 run `git diff` to assess):\n' +
        '  \u2022 Failed to update b.txt: Post-write verification failed for b.txt: on-disk content hash differs from ' +
        'the intended write. The write did not persist correctly \u2014 re-read the file and retry.',
    });
    assert.equal(await readFile(join(inner.root, 'a.txt'), 'utf8'), 'uno\n');
    await inner.dispose();
  });

  it('keeps applying after a failed delete and reports it in the apply-phase shape', async () => {
    const inner = await LocalTaskClientDouble.create('berth-patch-rmfail-');
    const stubborn: TaskClient = {
      exec: async (request) =>
        request.command.includes('locked.txt')
          ? { output: 'rm: cannot remove: Operation not permitted', exitCode: 1, timedOut: false, interrupted: false, notices: [] }
          : inner.exec(request),
      readFile: (p) => inner.readFile(p),
      writeFile: (p, content) => inner.writeFile(p, content),
      stat: (p) => inner.stat(p),
      startBackground: inner.startBackground.bind(inner),
      process: inner.process.bind(inner),
    };
    const context: ToolContext = {
      tenant: 'tenant-test',
      taskId: 'patch-rmfail',
      sessionId: 'session-test',
      task: stubborn,
      signal: new AbortController().signal,
      logger: silentLogger(),
    };
    await writeFile(join(inner.root, 'locked.txt'), 'x\n');
    await writeFile(join(inner.root, 'free.txt'), 'y\n');
    const patch = '*** Begin Patch\n*** Delete File: locked.txt\n*** Delete File: free.txt\n*** End Patch';
    const result = JSON.parse(await patchRegistration().handler({ mode: 'patch', patch }, context)) as Result;
    assert.deepEqual(result, {
      success: false,
      diff: '--- a/free.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-y\n',
      files_deleted: ['free.txt'],
      error:
        'Apply phase failed (state may be inconsistent \u2014 run `git diff` to assess):\n' +
        '  \u2022 Failed to delete locked.txt: Failed to delete locked.txt: rm: cannot remove: Operation not permitted',
    });
    await assert.rejects(readFile(join(inner.root, 'free.txt')));
    await inner.dispose();
  });
});
