/**
 * The file tools against real files and real rg/grep/find, through
 * LocalTaskClientDouble. Search runs once with engine auto (ripgrep when this
 * machine has it) and once forced onto the grep/find fallback.
 */
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { mkdir, readFile, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import {
  fileToolRegistrations,
  type FileToolOptions,
  type SearchEngine,
} from '../../services/dispatcher/tools/file-tools.js';
import type { ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import { FileLoopGuard } from '../../services/dispatcher/tools/file/loop-guard.js';
import { LocalTaskClientDouble } from '../fixtures/local-task-client.js';

type Result = Record<string, unknown>;

function hasRipgrep(): boolean {
  try {
    execFileSync('bash', ['-c', 'command -v rg'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Calls tools by name against one double, parsing their JSON results. */
class ToolHarness {
  readonly task: LocalTaskClientDouble;
  private readonly context: ToolContext;
  private readonly options: FileToolOptions;

  constructor(task: LocalTaskClientDouble, options: FileToolOptions = {}) {
    this.task = task;
    // One guard for the harness, as the dispatcher keeps one: write_file needs what read_file saw.
    this.options = { loopGuard: new FileLoopGuard(), ...options };
    this.context = {
      tenant: 'tenant-test',
      taskId: 'task-test',
      sessionId: 'session-test',
      task,
      signal: new AbortController().signal,
      logger: silentLogger(),
    };
  }

  async call(name: string, args: Record<string, unknown>): Promise<Result> {
    const registration = fileToolRegistrations(this.options).find((reg) => reg.name === name);
    assert.ok(registration, `no tool ${name}`);
    return JSON.parse(await registration.handler(args, this.context)) as Result;
  }

  /** The result text as the model sees it (search_files appends a hint after the JSON). */
  async callText(name: string, args: Record<string, unknown>): Promise<string> {
    const registration = fileToolRegistrations(this.options).find((reg) => reg.name === name);
    assert.ok(registration, `no tool ${name}`);
    return registration.handler(args, this.context);
  }

  path(relative: string): string {
    return join(this.task.root, relative);
  }

  async write(relative: string, content: string | Buffer): Promise<void> {
    await mkdir(join(this.path(relative), '..'), { recursive: true });
    await writeFile(this.path(relative), content);
  }

  async read(relative: string): Promise<string> {
    return readFile(this.path(relative), 'utf8');
  }

  async exists(relative: string): Promise<boolean> {
    return stat(this.path(relative)).then(
      () => true,
      () => false,
    );
  }
}

async function withHarness(options: FileToolOptions = {}): Promise<ToolHarness> {
  return new ToolHarness(await LocalTaskClientDouble.create('berth-file-tools-'), options);
}

describe('file toolset registrations', () => {
  it('registers the four tools in the file toolset with their schemas', () => {
    const regs = fileToolRegistrations();
    assert.deepEqual(
      regs.map((reg) => [reg.name, reg.toolset, reg.schema.name]),
      [
        ['read_file', 'file', 'read_file'],
        ['write_file', 'file', 'write_file'],
        ['patch', 'file', 'patch'],
        ['search_files', 'file', 'search_files'],
      ],
    );
    const read = regs[0]?.schema.parameters as { required: string[]; properties: Record<string, Record<string, unknown>> };
    assert.deepEqual(read.required, ['path']);
    assert.equal(read.properties.offset?.default, 1);
    assert.equal(read.properties.limit?.maximum, 2000);
    for (const reg of regs) {
      const props = (reg.schema.parameters as { properties: Record<string, { description?: string }> }).properties;
      for (const [name, prop] of Object.entries(props)) assert.ok(prop.description, `${reg.name}.${name} has a description`);
    }
  });
});

describe('read_file', () => {
  let h: ToolHarness;
  before(async () => {
    h = await withHarness();
  });
  after(async () => h.task.dispose());

  it('numbers lines with a compact gutter, in upstream ReadResult shape', async () => {
    await h.write('hello.txt', 'hello\nworld\n');
    const result = await h.call('read_file', { path: 'hello.txt' });
    assert.deepEqual(result, {
      content: '1|hello\n2|world',
      total_lines: 2,
      file_size: 12,
      truncated: false,
      is_binary: false,
      is_image: false,
    });
  });

  it('pages with offset and limit and hints at the next offset', async () => {
    await h.write('long.txt', Array.from({ length: 1200 }, (_, i) => `line ${i + 1}`).join('\n') + '\n');
    const first = await h.call('read_file', { path: 'long.txt', limit: 500 });
    assert.equal(first.total_lines, 1200);
    assert.equal(first.truncated, true);
    assert.equal(String(first.content).split('\n').length, 500);
    assert.equal(first.hint, 'Use offset=501 to continue reading (showing 1-500 of 1200 lines)');

    const last = await h.call('read_file', { path: 'long.txt', offset: 1001, limit: 500 });
    const lines = String(last.content).split('\n');
    assert.equal(lines[0], '1001|line 1001');
    assert.equal(lines.at(-1), '1200|line 1200');
    assert.equal(last.truncated, false);
    assert.equal(last.hint, undefined);

    const clamped = await h.call('read_file', { path: 'long.txt', limit: 5000, offset: 0 });
    assert.equal(String(clamped.content).split('\n').length, 1200);
    assert.match(String(clamped.content), /^1\|line 1\n/);

    const past = await h.call('read_file', { path: 'long.txt', offset: 1300 });
    assert.deepEqual(past, {
      content: '',
      total_lines: 1200,
      file_size: (await stat(h.path('long.txt'))).size,
      truncated: false,
      hint: 'Note: offset 1300 is beyond the end of the file (1200 lines total). Retry with offset <= 1200.',
      is_binary: false,
      is_image: false,
    });
  });

  it('caps long lines with a marker and strips CR from CRLF files', async () => {
    await h.write('wide.txt', `${'x'.repeat(3000)}\r\nshort\r\n`);
    const result = await h.call('read_file', { path: 'wide.txt' });
    const [first, second] = String(result.content).split('\n');
    assert.equal(first, `1|${'x'.repeat(2000)}... [truncated]`);
    assert.equal(second, '2|short');
  });

  it('cuts a read over 100,000 characters on a line boundary and says where to continue', async () => {
    await h.write('huge-lines.txt', Array.from({ length: 100 }, () => 'y'.repeat(1990)).join('\n'));
    const result = await h.call('read_file', { path: 'huge-lines.txt', limit: 100 });
    const rows = String(result.content).split('\n');
    assert.deepEqual([rows.length, rows[0], rows[49]], [50, `1|${'y'.repeat(1990)}`, `50|${'y'.repeat(1990)}`]);
    // Upstream's keys: the ReadResult's in place, then truncated_by and next_offset, then the hint it had not.
    assert.deepEqual(Object.keys(result), [
      'content',
      'total_lines',
      'file_size',
      'truncated',
      'is_binary',
      'is_image',
      'truncated_by',
      'next_offset',
      'hint',
    ]);
    assert.deepEqual([result.total_lines, result.file_size, result.truncated, result.truncated_by, result.next_offset], [
      100,
      199_099,
      true,
      'bytes',
      51,
    ]);
    assert.equal(
      result.hint,
      'Output truncated at the 100,000-char read budget after 50 line(s) (showing lines 1-50 of 100). Use offset=51 to continue.',
    );
    // The rest is there from next_offset, and a page cut by its limit keeps its hint where it was.
    const rest = await h.call('read_file', { path: 'huge-lines.txt', offset: 51, limit: 60 });
    assert.deepEqual([String(rest.content).split('\n').length, rest.next_offset, rest.truncated_by], [50, undefined, undefined]);
    const both = await h.call('read_file', { path: 'huge-lines.txt', offset: 1, limit: 99 });
    assert.deepEqual(Object.keys(both).slice(3, 5), ['truncated', 'hint']);
    assert.equal(both.next_offset, 51);
  });

  it('reads 2,000 lines by default', async () => {
    await h.write('many.txt', Array.from({ length: 2500 }, (_, i) => `l${i + 1}`).join('\n'));
    const result = await h.call('read_file', { path: 'many.txt' });
    assert.equal(String(result.content).split('\n').length, 2000);
    assert.equal(result.hint, 'Use offset=2001 to continue reading (showing 1-2000 of 2500 lines)');
  });

  it('flags unresolved merge-conflict blocks in the range read', async () => {
    const text = ['a', '<<<<<<< HEAD', 'ours', '=======', 'theirs', '>>>>>>> topic', 'b', '<<<<<<< HEAD', 'x'].join('\n');
    await h.write('conflict.txt', text);
    const result = await h.call('read_file', { path: 'conflict.txt' });
    assert.deepEqual(Object.keys(result).slice(-2), ['conflict_blocks', '_hint']);
    assert.equal(result.conflict_blocks, 1, 'only balanced pairs count');
    assert.equal(
      result._hint,
      '1 unresolved git merge-conflict block(s) (<<<<<<< / ======= / >>>>>>>) in this range. Resolve them (keep one ' +
        'side or combine, delete the markers) before editing around them.',
    );
    // A block cut by paging, or markers without the space git writes, are not flagged.
    const page = await h.call('read_file', { path: 'conflict.txt', limit: 3 });
    assert.equal(page.conflict_blocks, undefined);
    await h.write('plain.txt', '<<<<<<<\n>>>>>>>\n');
    assert.equal((await h.call('read_file', { path: 'plain.txt' })).conflict_blocks, undefined);
    // In a large file the conflict hint wins over the large-file one.
    await h.write('big-conflict.txt', `${text}\n${Array.from({ length: 3000 }, () => 'z'.repeat(300)).join('\n')}`);
    const big = await h.call('read_file', { path: 'big-conflict.txt' });
    assert.deepEqual([big.conflict_blocks, String(big._hint).startsWith('1 unresolved git merge-conflict')], [1, true]);
  });

  it('reads an empty file', async () => {
    await h.write('empty.txt', '');
    assert.deepEqual(await h.call('read_file', { path: 'empty.txt' }), {
      content: '',
      total_lines: 0,
      file_size: 0,
      truncated: false,
      hint: 'File is empty (0 bytes).',
      is_binary: false,
      is_image: false,
    });
  });

  it('refuses binary files, naming their type and size', async () => {
    await h.write('image.dump', Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x01, 0x02]));
    assert.deepEqual(await h.call('read_file', { path: 'image.dump' }), {
      content: '',
      total_lines: 0,
      file_size: 11,
      truncated: false,
      is_binary: true,
      is_image: false,
      error: 'Binary file (PNG image data, 11 bytes) — cannot display as text.',
    });
  });

  it('reports a missing file with similar names', async () => {
    await h.write('conf/config.yaml', 'a: 1\n');
    await h.write('conf/other.txt', 'x\n');
    const result = await h.call('read_file', { path: 'conf/confg.yaml' });
    assert.equal(result.error, 'File not found: conf/confg.yaml');
    assert.deepEqual(result.similar_files, ['conf/config.yaml']);

    const bare = await h.call('read_file', { path: 'nowhere/at/all.txt' });
    assert.deepEqual(bare, {
      content: '',
      total_lines: 0,
      file_size: 0,
      truncated: false,
      is_binary: false,
      is_image: false,
      error: 'File not found: nowhere/at/all.txt',
    });
  });

  it('refuses directories as not a regular file', async () => {
    await mkdir(h.path('adir'), { recursive: true });
    const result = await h.call('read_file', { path: 'adir' });
    assert.equal(
      result.error,
      "Cannot read 'adir': not a regular file (directory, FIFO, socket, or device). Reading it could block indefinitely.",
    );
  });

  it('validates arguments', async () => {
    assert.deepEqual(await h.call('read_file', {}), { error: 'Missing required parameter: path' });
    assert.deepEqual(await h.call('read_file', { path: 'hello.txt', offset: 'x' }), {
      error: 'Parameter offset must be an integer',
    });
  });

  it('reads a page from the middle of a 5 MB file, with the large-file hint only for wide reads', async () => {
    const line = (n: number): string => `row ${String(n).padStart(7, '0')} ${'z'.repeat(38)}`;
    const content = Array.from({ length: 100_000 }, (_, i) => line(i + 1)).join('\n') + '\n';
    assert.ok(content.length >= 5_000_000);
    await h.write('big.txt', content);
    const result = await h.call('read_file', { path: 'big.txt', offset: 50_000, limit: 3 });
    assert.equal(result.content, [`50000|${line(50_000)}`, `50001|${line(50_001)}`, `50002|${line(50_002)}`].join('\n'));
    assert.equal(result.total_lines, 100_000);
    assert.equal(result.file_size, content.length);
    assert.equal(result.truncated, true);
    assert.equal(result.hint, 'Use offset=50003 to continue reading (showing 50000-50002 of 100000 lines)');
    assert.equal(result._hint, undefined);

    const wide = await h.call('read_file', { path: 'big.txt', limit: 500 });
    assert.equal(
      wide._hint,
      `This file is large (${content.length.toLocaleString('en-US')} bytes). Consider reading only the section you ` +
        'need with offset and limit to keep context usage efficient.',
    );
  });
});

describe('read_file and write_file on what is not a regular file', () => {
  let h: ToolHarness;
  before(async () => {
    h = await withHarness();
  });
  after(async () => h.task.dispose());

  it('refuses devices, FIFOs and files over the cap at once, with the reason', async () => {
    assert.equal(
      (await h.call('read_file', { path: '/dev/zero' })).error,
      "Cannot read '/dev/zero': this is a device file that would block or produce infinite output.",
    );
    execFileSync('mkfifo', [h.path('pipe')]);
    assert.equal(
      (await h.call('read_file', { path: 'pipe' })).error,
      "Cannot read 'pipe': not a regular file (directory, FIFO, socket, or device). Reading it could block indefinitely.",
    );
    assert.match(String((await h.call('write_file', { path: 'pipe', content: 'x' })).error), /pipe is not a regular file/);
    execFileSync('truncate', ['-s', '1G', h.path('sparse')]);
    assert.match(
      String((await h.call('read_file', { path: 'sparse' })).error),
      /^File too large to read: .*sparse is 1,073,741,824 bytes; the file tools read files up to 8,388,608 bytes \(8 MiB\)\. Read parts of it with the terminal/,
    );
  });
});

describe('write_file', () => {
  let h: ToolHarness;
  before(async () => {
    h = await withHarness();
  });
  after(async () => h.task.dispose());

  it('creates missing parent directories and reports bytes and the resolved path', async () => {
    const result = await h.call('write_file', { path: 'deep/er/file.txt', content: 'héllo\n' });
    const abs = h.path('deep/er/file.txt');
    assert.deepEqual(result, { bytes_written: 7, dirs_created: true, resolved_path: abs, files_modified: [abs] });
    assert.equal(await h.read('deep/er/file.txt'), 'héllo\n');

    const again = await h.call('write_file', { path: 'deep/er/file.txt', content: '' });
    assert.deepEqual(again, { bytes_written: 0, dirs_created: false, resolved_path: abs, files_modified: [abs] });
    assert.equal(await h.read('deep/er/file.txt'), '');
  });

  it('refuses directories and missing content', async () => {
    assert.match(String((await h.call('write_file', { path: 'deep', content: 'x' })).error), /deep is a directory/);
    assert.match(String((await h.call('write_file', { path: 'x.txt' })).error), /^write_file: missing required field 'content'\./);
  });
});

describe('patch (replace mode)', () => {
  let h: ToolHarness;
  const original = 'def a():\n    return 1\n\ndef b():\n    return 1\n';
  before(async () => {
    h = await withHarness();
  });
  after(async () => h.task.dispose());

  it('replaces a unique string and returns the diff', async () => {
    await h.write('m.py', original);
    const result = await h.call('patch', { path: 'm.py', old_string: 'def a():\n    return 1', new_string: 'def a():\n    return 42' });
    // Upstream's PatchResult order: success, diff, files_modified (absolute), then resolved_path.
    assert.deepEqual(Object.keys(result), ['success', 'diff', 'files_modified', 'resolved_path']);
    assert.equal(result.success, true);
    assert.deepEqual(result.files_modified, [h.path('m.py')]);
    assert.equal(result.resolved_path, h.path('m.py'));
    assert.equal(result.diff, '--- a/m.py\n+++ b/m.py\n@@ -1,5 +1,5 @@\n def a():\n-    return 1\n+    return 42\n \n def b():\n     return 1\n');
    assert.equal(await h.read('m.py'), original.replace('return 1', 'return 42'));
  });

  it('refuses an ambiguous old_string, leaving the file alone', async () => {
    await h.write('m.py', original);
    const result = await h.call('patch', { path: 'm.py', old_string: 'return 1', new_string: 'return 2' });
    assert.deepEqual(result, {
      success: false,
      error:
        'Found 2 matches for old_string. Provide more context to make it unique, or use replace_all=True. ' +
        'Matches:\n  L2: return 1\n  L5: return 1',
    });
    assert.equal(await h.read('m.py'), original);
  });

  it('replaces every occurrence with replace_all', async () => {
    await h.write('m.py', original);
    const result = await h.call('patch', { path: 'm.py', old_string: 'return 1', new_string: 'return 2', replace_all: true });
    assert.equal(result.success, true);
    assert.equal(await h.read('m.py'), original.replaceAll('return 1', 'return 2'));
  });

  it('reports an old_string that is not there', async () => {
    await h.write('m.py', original);
    const result = await h.call('patch', { path: 'm.py', old_string: 'zzz_absent', new_string: 'x' });
    assert.deepEqual(result, {
      success: false,
      error: 'Could not find a match for old_string in the file',
      _hint: 'old_string not found. Use read_file to verify the current content, or search_files to locate the text.',
    });
    assert.equal(await h.read('m.py'), original);
  });

  it('falls back to whitespace-tolerant matching', async () => {
    await h.write('m.py', original);
    const result = await h.call('patch', {
      path: 'm.py',
      old_string: 'def b():\n  return 1\n',
      new_string: 'def b():\n    return 5\n',
    });
    assert.equal(result.success, true, JSON.stringify(result));
    assert.equal(await h.read('m.py'), 'def a():\n    return 1\n\ndef b():\n    return 5\n');
  });

  it('reports missing files and refuses binary ones', async () => {
    assert.deepEqual(await h.call('patch', { path: 'nope.py', old_string: 'a', new_string: 'b' }), {
      success: false,
      error: `Failed to read file: ${h.path('nope.py')}`,
    });
    await h.write('blob.bin', Buffer.from('ab\0cd'));
    const binary = await h.call('patch', { path: 'blob.bin', old_string: 'ab', new_string: 'x' });
    assert.equal(binary.success, false);
    assert.match(String(binary.error), /binary file/);
  });
});

describe('patch (patch mode)', () => {
  let h: ToolHarness;
  before(async () => {
    h = await withHarness();
  });
  after(async () => h.task.dispose());

  const multiFilePatch = [
    '*** Begin Patch',
    '*** Update File: src/app.ts',
    '@@ export function main() {',
    "-  console.log('hi');",
    "+  console.log('hello');",
    '*** Add File: src/new module.ts',
    '+export const x = 1;',
    "*** Delete File: it's gone.txt",
    '*** Move File: src/old:name.ts -> src/renamed.ts',
    '*** Update File: src/renamed.ts',
    '-export const y = 2;',
    '+export const y = 3;',
    '*** End Patch',
  ].join('\n');

  async function seed(): Promise<void> {
    await rm(h.path('src'), { recursive: true, force: true });
    await h.write('src/app.ts', "import a from 'a';\n\nexport function main() {\n  console.log('hi');\n}\n");
    await h.write("it's gone.txt", 'bye\n');
    await h.write('src/old:name.ts', 'export const y = 2;\n');
  }

  it('updates, adds, deletes and moves in one call', async () => {
    await seed();
    const result = await h.call('patch', { mode: 'patch', patch: multiFilePatch });
    assert.equal(result.success, true, JSON.stringify(result));
    assert.deepEqual(Object.keys(result), ['success', 'diff', 'files_modified', 'files_created', 'files_deleted']);
    // As upstream: files_modified names every file the patch's headers name, as absolute paths.
    assert.deepEqual(
      result.files_modified,
      ['src/app.ts', 'src/new module.ts', "it's gone.txt", 'src/old:name.ts', 'src/renamed.ts'].map((p) => h.path(p)),
    );
    // As upstream's PatchResult: created and deleted name the Add and Delete headers as written.
    assert.deepEqual(result.files_created, ['src/new module.ts']);
    assert.deepEqual(result.files_deleted, ["it's gone.txt"]);
    const diff = String(result.diff);
    assert.match(diff, /--- a\/src\/app\.ts\n\+\+\+ b\/src\/app\.ts\n@@ -1,5 \+1,5 @@\n/);
    assert.match(diff, /\n--- \/dev\/null\n\+\+\+ b\/src\/new module\.ts\n\+export const x = 1;\n/);
    assert.match(diff, /--- a\/it's gone\.txt\n\+\+\+ \/dev\/null\n/);
    assert.match(
      diff,
      /# Moved: src\/old:name\.ts -> src\/renamed\.ts\n--- a\/src\/old:name\.ts\n\+\+\+ b\/src\/renamed\.ts\n@@ -1 \+1 @@\n-export const y = 2;\n\+export const y = 3;\n/,
    );

    assert.match(await h.read('src/app.ts'), /console\.log\('hello'\)/);
    assert.equal(await h.read('src/new module.ts'), 'export const x = 1;\n');
    assert.equal(await h.read('src/renamed.ts'), 'export const y = 3;\n');
    assert.equal(await h.exists("it's gone.txt"), false);
    assert.equal(await h.exists('src/old:name.ts'), false);
    // The delete went through a stateless, quoted rm.
    const rm = h.task.execLog.find((request) => request.command.startsWith('rm -f -- '));
    assert.ok(rm?.stateless);
  });

  it('writes nothing when any hunk fails', async () => {
    await seed();
    const failing = multiFilePatch.replace('*** End Patch', '*** Update File: src/app.ts\n-  this line is not there\n+  nor this\n*** End Patch');
    const result = await h.call('patch', { mode: 'patch', patch: failing });
    assert.equal(
      result.error,
      'Patch validation failed (no files were modified):\n' +
        '  \u2022 src/app.ts: hunk 1 (no hint) not found \u2014 Could not find a match for old_string in the file',
    );
    assert.equal(result._hint, 'old_string not found. Use read_file to verify the current content, or search_files to locate the text.');
    assert.equal(result.success, false);
    assert.match(await h.read('src/app.ts'), /console\.log\('hi'\)/);
    assert.equal(await h.exists('src/new module.ts'), false);
    assert.equal(await h.exists('src/renamed.ts'), false);
    assert.equal(await h.read("it's gone.txt"), 'bye\n');
    assert.equal(await h.read('src/old:name.ts'), 'export const y = 2;\n');
  });

  it('accepts a unified diff, with mode implied by the patch argument', async () => {
    await h.write('lib/util.py', 'def f(x):\n    return x\n\n\ndef g(x):\n    return x * 2\n');
    const diff = [
      'diff --git a/lib/util.py b/lib/util.py',
      '--- a/lib/util.py',
      '+++ b/lib/util.py',
      '@@ -4,3 +4,3 @@ def f(x):',
      ' ',
      ' def g(x):',
      '-    return x * 2',
      '+    return x * 3',
      '--- /dev/null',
      '+++ b/lib/new.py',
      '@@ -0,0 +1 @@',
      '+VALUE = 1',
    ].join('\n');
    const result = await h.call('patch', { patch: diff });
    assert.equal(result.success, true, JSON.stringify(result));
    assert.deepEqual(result.files_modified, [h.path('lib/util.py'), h.path('lib/new.py')]);
    assert.deepEqual(result.files_created, ['lib/new.py']);
    assert.equal(await h.read('lib/util.py'), 'def f(x):\n    return x\n\n\ndef g(x):\n    return x * 3\n');
    assert.equal(await h.read('lib/new.py'), 'VALUE = 1\n');
  });

  it('explains unparseable patches', async () => {
    const result = await h.call('patch', { mode: 'patch', patch: 'please change foo to bar' });
    assert.equal(result.success, false);
    assert.match(String(result.error), /^Failed to parse patch: Unrecognized patch format/);
    assert.deepEqual(await h.call('patch', { mode: 'patch' }), { error: 'patch content required' });
    assert.deepEqual(await h.call('patch', { mode: 'fix' }), { error: 'Unknown mode: fix' });
  });
});

/** The same search assertions for each engine the tool can end up using. */
function searchSuite(label: string, engine: SearchEngine): void {
  describe(`search_files (${label})`, () => {
    let h: ToolHarness;
    before(async () => {
      h = await withHarness({ searchEngine: engine });
      await h.write('src/alpha.ts', 'const needle = 1;\nconst other = 2;\nexport { needle };\n');
      await h.write('src/beta.py', 'needle = True\nprint(needle)\n');
      await h.write('dir one/we:ird name.txt', 'a needle: in: colons\n');
      await h.write('node_modules/pkg/index.js', 'needle\n');
      await h.write('.git/config', 'needle\n');
      await h.write('docs/guide.md', '# guide\n');
      await h.write('docs/readme.MD', '# readme\n');
      await h.write('notes.md', '# notes\n');
      await h.write('seq.txt', Array.from({ length: 10 }, (_, i) => `item ${i + 1}`).join('\n') + '\n');
      await h.write('ctx.txt', 'one\ntwo\nthree MATCH\nfour\nfive\n');
      await h.write('-dash.txt', '--flag-like\n');
      await h.write('bin.dat', Buffer.from('needle\0binary'));
      // Distinct mtimes, newest last written, for the files target order.
      const base = Date.now() / 1000;
      await utimes(h.path('notes.md'), base - 300, base - 300);
      await utimes(h.path('docs/guide.md'), base - 200, base - 200);
      await utimes(h.path('docs/readme.MD'), base - 100, base - 100);
    });
    after(async () => h.task.dispose());

    it('finds content matches with path, line and text, skipping .git, node_modules and binaries', async () => {
      // Five matches: sent path-grouped, as upstream's densified shape.
      const result = await h.call('search_files', { pattern: 'needle' });
      assert.deepEqual(result, {
        total_count: 5,
        matches_format:
          "path-grouped: each file path on its own line, followed by indented '<line>: <content>' rows for matches in that file",
        matches_text: [
          'dir one/we:ird name.txt',
          '  1: a needle: in: colons',
          'src/alpha.ts',
          '  1: const needle = 1;',
          '  3: export { needle };',
          'src/beta.py',
          '  1: needle = True',
          '  2: print(needle)',
        ].join('\n'),
      });
      // Fewer than five: a matches array of {path, line, content}.
      const few = await h.call('search_files', { pattern: 'needle', path: 'src' });
      assert.deepEqual(few, {
        total_count: 4,
        matches: [
          { path: 'src/alpha.ts', line: 1, content: 'const needle = 1;' },
          { path: 'src/alpha.ts', line: 3, content: 'export { needle };' },
          { path: 'src/beta.py', line: 1, content: 'needle = True' },
          { path: 'src/beta.py', line: 2, content: 'print(needle)' },
        ],
      });
    });

    it('uses regular expressions and a file glob', async () => {
      const result = await h.call('search_files', { pattern: 'needle\\s*=', file_glob: '*.py' });
      assert.deepEqual(result.matches, [{ path: 'src/beta.py', line: 1, content: 'needle = True' }]);
    });

    it('searches a sub-path and handles patterns that look like options', async () => {
      const scoped = await h.call('search_files', { pattern: 'needle', path: 'src', output_mode: 'files_only' });
      assert.deepEqual(scoped.files, ['src/alpha.ts', 'src/beta.py']);
      const dashed = await h.call('search_files', { pattern: '--flag' });
      assert.deepEqual(dashed.matches, [{ path: '-dash.txt', line: 1, content: '--flag-like' }]);
    });

    it('expands ~ in the search path', async () => {
      // The double's home is its root, as an executor's would be the task's home.
      const result = await h.call('search_files', { pattern: 'needle', path: '~/src', output_mode: 'files_only' });
      assert.deepEqual(result.files, [h.path('src/alpha.ts'), h.path('src/beta.py')]);
    });

    it('lists matching files and counts per file', async () => {
      const files = await h.call('search_files', { pattern: 'needle', output_mode: 'files_only' });
      assert.deepEqual(files, { total_count: 3, files: ['dir one/we:ird name.txt', 'src/alpha.ts', 'src/beta.py'] });
      const counts = await h.call('search_files', { pattern: 'needle', output_mode: 'count' });
      assert.deepEqual(counts, {
        total_count: 5,
        counts: { 'dir one/we:ird name.txt': 1, 'src/alpha.ts': 2, 'src/beta.py': 2 },
      });
    });

    it('adds context lines to each match', async () => {
      const result = await h.call('search_files', { pattern: 'MATCH', context: 1 });
      assert.deepEqual(result.matches, [
        { path: 'ctx.txt', line: 3, content: 'three MATCH', context_before: ['two'], context_after: ['four'] },
      ]);
      const wide = await h.call('search_files', { pattern: 'item (1|2)$', context: 2, path: 'seq.txt' });
      assert.deepEqual(wide.matches, [
        { path: 'seq.txt', line: 1, content: 'item 1', context_before: [], context_after: ['item 2', 'item 3'] },
        { path: 'seq.txt', line: 2, content: 'item 2', context_before: ['item 1'], context_after: ['item 3', 'item 4'] },
      ]);
    });

    it('pages with offset and limit', async () => {
      const result = await h.call('search_files', { pattern: '^item', path: 'seq.txt', offset: 3, limit: 3 });
      assert.deepEqual(
        (result.matches as { line: number }[]).map((match) => match.line),
        [4, 5, 6],
      );
      assert.equal(result.total_count, 10);
      assert.equal(result.truncated, true);
      assert.equal(result.total_count_is_lower_bound, true);
      // The hint is the object's last key: nothing follows the JSON.
      assert.equal(Object.keys(result).at(-1), '_hint');
      assert.equal(result._hint, 'Results truncated. Use offset=6 to see more, or narrow with a more specific pattern or file_glob.');
      const text = await h.callText('search_files', { pattern: '^item', path: 'seq.txt', offset: 3, limit: 3 });
      assert.ok(text.endsWith('}'), text);
      const tail = await h.call('search_files', { pattern: '^item', path: 'seq.txt', offset: 9, limit: 3 });
      assert.equal((tail.matches as unknown[]).length, 1);
      assert.deepEqual([tail.truncated, tail._hint], [undefined, undefined]);
    });

    it('finds files by name glob case-insensitively, in path order or newest first', async () => {
      const result = await h.call('search_files', { pattern: '*.md', target: 'files' });
      assert.deepEqual(result, { total_count: 3, files: ['docs/guide.md', 'docs/readme.MD', 'notes.md'] });
      const newest = await h.call('search_files', { pattern: '*.md', target: 'files', order: 'modified' });
      assert.deepEqual(newest, { total_count: 3, files: ['docs/readme.MD', 'docs/guide.md', 'notes.md'] });
      const bare = await h.call('search_files', { pattern: 'we:ird', target: 'files' });
      assert.deepEqual(bare.files, ['dir one/we:ird name.txt']);
      const paged = await h.call('search_files', { pattern: '*.md', target: 'files', limit: 1, offset: 1 });
      assert.deepEqual(paged.files, ['docs/readme.MD']);
      assert.equal(paged.truncated, true);
      assert.deepEqual(await h.call('search_files', { pattern: '*.md', target: 'files', order: 'newest' }), {
        total_count: 0,
        error: "Invalid file search order 'newest'; expected 'discovery' or 'modified'.",
      });
    });

    it('returns empty results and clear errors', async () => {
      assert.deepEqual(await h.call('search_files', { pattern: 'no such text anywhere' }), { total_count: 0 });
      assert.deepEqual(await h.call('search_files', { pattern: 'x', path: 'missing-dir' }), {
        total_count: 0,
        error: 'Path not found: missing-dir',
      });
      assert.match(String((await h.call('search_files', { pattern: '(' })).error), /^Search failed: /);
      assert.deepEqual(await h.call('search_files', {}), { error: 'Missing required parameter: pattern' });
    });

    it('skips a FIFO inside the searched directory and refuses one named as the path', async () => {
      await mkdir(h.path('fifo-dir'), { recursive: true });
      execFileSync('mkfifo', [h.path('fifo-dir/pipe')]);
      await h.write('fifo-dir/text.txt', 'fifo neighbour\n');
      // Without -D skip / the path check, grep and rg block on the FIFO until the search times out.
      const inside = await h.call('search_files', { pattern: 'neighbour', path: 'fifo-dir' });
      assert.deepEqual(inside.matches, [{ path: 'fifo-dir/text.txt', line: 1, content: 'fifo neighbour' }]);
      assert.deepEqual(await h.call('search_files', { pattern: 'x', path: 'fifo-dir/pipe' }), {
        total_count: 0,
        error: 'Search failed: fifo-dir/pipe is not a regular file or directory; search_files only reads regular files',
      });
      assert.match(String((await h.call('search_files', { pattern: 'x', path: '/dev/zero' })).error), /is not a regular file or directory/);
    });

    it('runs as a stateless exec', async () => {
      const request = h.task.execLog.at(-1);
      assert.equal(request?.stateless, true);
      if (engine === 'grep') assert.doesNotMatch(request?.command ?? '', /command -v rg|\brg --/);
      else assert.match(request?.command ?? '', /command -v rg/);
    });
  });
}

searchSuite(hasRipgrep() ? 'auto: ripgrep' : 'auto: ripgrep missing, fallback', 'auto');
searchSuite('forced grep/find fallback', 'grep');
