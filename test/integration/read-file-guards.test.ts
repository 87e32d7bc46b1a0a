/**
 * read_file's guards as a model meets them, through a real ToolRegistry (so
 * "any other tool call resets" goes through the registry's observer hook)
 * over real files: devices and FIFOs refused at once, /proc secrets refused
 * by name and through a symlink, binary names and types, UTF-16 and BOM
 * handling, the dedup stub and the repeated read/search guards.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import { ToolRegistry } from '../../services/dispatcher/registry/registry.js';
import { fileToolRegistrations } from '../../services/dispatcher/tools/file-tools.js';
import type { ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import { LocalTaskClientDouble } from '../fixtures/local-task-client.js';

type Result = Record<string, unknown>;

const UNCHANGED_MESSAGE =
  'File unchanged since last read. The content from the earlier read_file result in this conversation is still ' +
  'current — refer to that instead of re-reading.';

class Harness {
  readonly registry = new ToolRegistry({ logger: silentLogger() });
  readonly task: LocalTaskClientDouble;
  context: ToolContext;

  constructor(task: LocalTaskClientDouble) {
    this.task = task;
    for (const reg of fileToolRegistrations({ searchEngine: 'grep' })) this.registry.register(reg);
    // Stands in for any other tool (terminal, process, ...): only its being called matters.
    this.registry.register({
      name: 'other_tool',
      toolset: 'test',
      schema: { name: 'other_tool', description: 'does nothing', parameters: { type: 'object', properties: {} } },
      handler: () => '{}',
    });
    this.context = this.contextFor('session-1');
  }

  contextFor(sessionId: string, taskId = 'task-1'): ToolContext {
    return { tenant: 'tenant-1', taskId, sessionId, task: this.task, signal: new AbortController().signal, logger: silentLogger() };
  }

  async call(name: string, args: Record<string, unknown>, context = this.context): Promise<Result> {
    return JSON.parse(await this.registry.dispatch(name, args, context)) as Result;
  }

  path(relative: string): string {
    return join(this.task.root, relative);
  }

  async write(relative: string, content: string | Buffer): Promise<void> {
    await mkdir(join(this.path(relative), '..'), { recursive: true });
    await writeFile(this.path(relative), content);
  }
}

async function harness(): Promise<Harness> {
  return new Harness(await LocalTaskClientDouble.create('berth-read-guards-'));
}

const NOT_REGULAR = (path: string): string =>
  `Cannot read '${path}': not a regular file (directory, FIFO, socket, or device). Reading it could block indefinitely.`;
const DEVICE = (path: string): string => `Cannot read '${path}': this is a device file that would block or produce infinite output.`;

describe('read_file: what is not a regular file', () => {
  let h: Harness;
  before(async () => {
    h = await harness();
  });
  after(async () => h.task.dispose());

  it('answers a FIFO without a writer at once instead of blocking', async () => {
    execFileSync('mkfifo', [h.path('fifo')]);
    // A blocking open would never return and the test would time out.
    assert.deepEqual(await h.call('read_file', { path: 'fifo' }), {
      content: '',
      total_lines: 0,
      file_size: 0,
      truncated: false,
      is_binary: false,
      is_image: false,
      error: NOT_REGULAR('fifo'),
    });
  });

  it('refuses endless and blocking devices by name, before any I/O', async () => {
    for (const path of ['/dev/zero', '/dev/urandom', '/dev/stdin', '/dev/fd/0', '/proc/self/fd/1', '/proc/1/environ']) {
      assert.deepEqual(await h.call('read_file', { path }), { error: DEVICE(path) }, path);
    }
    assert.deepEqual(await h.call('read_file', { path: '/dev/../dev/zero' }), { error: DEVICE('/dev/../dev/zero') });
  });

  it('refuses /proc secrets through a symlink too', async () => {
    await symlink('/proc/self/environ', h.path('env-link'));
    assert.deepEqual(await h.call('read_file', { path: 'env-link' }), { error: DEVICE('env-link') });
  });

  it('refuses other devices and directories with the not-regular text', async () => {
    assert.equal((await h.call('read_file', { path: '/dev/null' })).error, NOT_REGULAR('/dev/null'));
    await mkdir(h.path('a-dir'));
    assert.equal((await h.call('read_file', { path: 'a-dir' })).error, NOT_REGULAR('a-dir'));
  });
});

describe('read_file: binary and encoded content', () => {
  let h: Harness;
  before(async () => {
    h = await harness();
  });
  after(async () => h.task.dispose());

  it('refuses binary extensions by name', async () => {
    assert.deepEqual(await h.call('read_file', { path: 'missing/photo.PNG' }), {
      error: "Cannot read binary file 'missing/photo.PNG' (.png). Use vision_analyze for images, or terminal to inspect binary files.",
    });
    assert.deepEqual(await h.call('read_file', { path: 'lib.so' }), {
      error: "Cannot read binary file 'lib.so' (.so). Use vision_analyze for images, or terminal to inspect binary files.",
    });
  });

  it('names the type of binary content from its magic bytes and gives the size', async () => {
    await h.write('prog', Buffer.concat([Buffer.from('7f454c4602010100', 'hex'), Buffer.alloc(3000)]));
    assert.equal((await h.call('read_file', { path: 'prog' })).error, 'Binary file (ELF executable, 2.9 KB) — cannot display as text.');
    await h.write('blob', Buffer.from([0x01, 0x00, 0xff, 0x10]));
    assert.equal((await h.call('read_file', { path: 'blob' })).error, 'Binary file (unknown binary, 4 bytes) — cannot display as text.');
    await h.write('latin1.txt', Buffer.from('caf\xe9 au lait\n', 'latin1'));
    assert.equal((await h.call('read_file', { path: 'latin1.txt' })).is_binary, true);
  });

  it('shows UTF-16 text transcoded, saying so', async () => {
    await h.write('win.txt', Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('one\r\ntwo', 'utf16le')]));
    assert.deepEqual(await h.call('read_file', { path: 'win.txt' }), {
      content: '1|one\n2|two',
      total_lines: 2,
      file_size: 18,
      truncated: false,
      hint: 'Transcoded from UTF-16-LE to UTF-8 for display. Text edits via patch/write_file would re-encode as UTF-8.',
      is_binary: false,
      is_image: false,
    });
  });

  it('strips a leading BOM and keeps a multibyte character cut by the binary sample', async () => {
    await h.write('bom.txt', '\ufeffname=x\n');
    assert.equal((await h.call('read_file', { path: 'bom.txt' })).content, '1|name=x');
    const text = `${'a'.repeat(999)}é tail\n`;
    await h.write('cut.txt', text);
    assert.equal((await h.call('read_file', { path: 'cut.txt' })).content, `1|${text.trimEnd()}`);
  });
});

describe('read_file: re-reads and loops', () => {
  let h: Harness;
  before(async () => {
    h = await harness();
  });
  after(async () => h.task.dispose());

  it('answers a repeat of an unchanged region with a stub, then blocks from the 3rd call', async () => {
    await h.write('a.txt', 'alpha\n');
    assert.equal((await h.call('read_file', { path: 'a.txt' })).content, '1|alpha');
    assert.deepEqual(await h.call('read_file', { path: 'a.txt' }), {
      status: 'unchanged',
      message: UNCHANGED_MESSAGE,
      path: 'a.txt',
      dedup: true,
      content_returned: false,
    });
    assert.deepEqual(await h.call('read_file', { path: 'a.txt' }), {
      error:
        'BLOCKED: You have called read_file on this exact region 3 times and the file has NOT changed. STOP calling ' +
        'read_file for this path — the content from your earlier read_file result in this conversation is still ' +
        'current. Proceed with your task using the information you already have.',
      path: 'a.txt',
      already_read: 3,
    });
    // Another tool call in between: a stub again, not a block.
    await h.call('other_tool', {});
    assert.equal((await h.call('read_file', { path: 'a.txt' })).status, 'unchanged');
    // Another page of the same file is another region.
    assert.equal((await h.call('read_file', { path: 'a.txt', limit: 10 })).content, '1|alpha');
  });

  it('returns the content again once the file changed, or after write_file wrote it', async () => {
    await h.write('b.txt', 'one\n');
    await h.call('read_file', { path: 'b.txt' });
    await h.write('b.txt', 'two\n');
    assert.equal((await h.call('read_file', { path: 'b.txt' })).content, '1|two');
    await h.call('write_file', { path: 'b.txt', content: 'two\n' });
    assert.equal((await h.call('read_file', { path: 'b.txt' })).content, '1|two');
  });

  it('warns on the 3rd identical read in a row and blocks the 4th when the file keeps changing', async () => {
    const results: Result[] = [];
    for (let i = 0; i < 4; i++) {
      await h.write('c.txt', `version ${i}\n`);
      results.push(await h.call('read_file', { path: 'c.txt' }));
    }
    assert.equal(results[1]?._warning, undefined);
    assert.equal(
      results[2]?._warning,
      'You have read this exact file region 3 times consecutively. The content has not changed since your last read. ' +
        'Use the information you already have. If you are stuck in a loop, stop reading and proceed with writing or responding.',
    );
    assert.equal(results[2]?.content, '1|version 2');
    assert.deepEqual(results[3], {
      error:
        'BLOCKED: You have read this exact file region 4 times in a row. The content has NOT changed. You already ' +
        'have this information. STOP re-reading and proceed with your task.',
      path: 'c.txt',
      already_read: 4,
    });
  });

  it('counts a missing file too, and resets on any other tool call', async () => {
    for (let i = 0; i < 2; i++) assert.equal((await h.call('read_file', { path: 'gone.txt' }))._warning, undefined);
    assert.match(String((await h.call('read_file', { path: 'gone.txt' }))._warning), /3 times consecutively/);
    await h.call('other_tool', {});
    const after = await h.call('read_file', { path: 'gone.txt' });
    assert.equal(after.error, 'File not found: gone.txt');
    assert.equal(after._warning, undefined);
  });

  it('keeps sessions and tasks apart, and forgets a task when it ends', async () => {
    await h.write('d.txt', 'delta\n');
    await h.call('read_file', { path: 'd.txt' });
    assert.equal((await h.call('read_file', { path: 'd.txt' }, h.contextFor('session-2'))).content, '1|delta');
    assert.equal((await h.call('read_file', { path: 'd.txt' }, h.contextFor('session-1', 'task-2'))).content, '1|delta');
    h.registry.taskEnded('tenant-1', 'task-1');
    assert.equal((await h.call('read_file', { path: 'd.txt' })).content, '1|delta');
  });
});

describe('write_file after read_file: stale content', () => {
  let h: Harness;
  before(async () => {
    h = await harness();
  });
  after(async () => h.task.dispose());

  it('refuses, rather than warns, when the file changed since this task read or wrote it', async () => {
    await h.write('s.txt', 'one\n');
    await h.call('read_file', { path: 's.txt' });
    const written = await h.call('write_file', { path: 's.txt', content: 'two\n' });
    assert.deepEqual(Object.keys(written), ['bytes_written', 'dirs_created', 'resolved_path', 'files_modified']);
    await h.write('s.txt', 'changed elsewhere\n');
    const stale = await h.call('write_file', { path: 's.txt', content: 'three\n' });
    assert.deepEqual(Object.keys(stale), ['error', 'stale_write_blocked', 'path', 'resolved_path']);
    assert.match(String(stale.error), /^Refusing to overwrite s\.txt: .*s\.txt was modified since you last read it on disk/);
    // Reading the new content makes the overwrite fine again.
    await h.call('read_file', { path: 's.txt' });
    assert.equal((await h.call('write_file', { path: 's.txt', content: 'four\n' })).bytes_written, 5);
  });
});

describe('search_files: repeated identical searches', () => {
  let h: Harness;
  before(async () => {
    h = await harness();
    await h.write('src/x.txt', 'needle\n');
  });
  after(async () => h.task.dispose());

  it('warns on the 3rd identical search in a row and blocks from the 4th', async () => {
    const first = await h.call('search_files', { pattern: 'needle', path: 'src' });
    assert.equal(first.total_count, 1);
    assert.equal((await h.call('search_files', { pattern: 'needle', path: 'src' }))._warning, undefined);
    const third = await h.call('search_files', { pattern: 'needle', path: 'src' });
    assert.equal(third.total_count, 1);
    assert.equal(
      third._warning,
      'You have run this exact search 3 times consecutively. The results have not changed. Use the information you already have.',
    );
    assert.deepEqual(await h.call('search_files', { pattern: 'needle', path: 'src' }), {
      error:
        'BLOCKED: You have run this exact search 4 times in a row. The results have NOT changed. You already have ' +
        'this information. STOP re-searching and proceed with your task.',
      pattern: 'needle',
      already_searched: 4,
    });
    assert.equal((await h.call('search_files', { pattern: 'needle', path: 'src' })).already_searched, 5);
  });

  it('puts the warning before the truncation hint, which upstream sets last', async () => {
    await h.call('other_tool', {});
    await h.write('src/y.txt', 'needle\nneedle\n');
    let third: Record<string, unknown> = {};
    for (let i = 0; i < 3; i++) third = await h.call('search_files', { pattern: 'needle', path: 'src', limit: 1 });
    assert.deepEqual(Object.keys(third).slice(-2), ['_warning', '_hint']);
    assert.equal(third._hint, 'Results truncated. Use offset=1 to see more, or narrow with a more specific pattern or file_glob.');
  });

  it('treats the next page, a read or any other call as a break in the streak', async () => {
    await h.call('other_tool', {});
    for (let i = 0; i < 3; i++) await h.call('search_files', { pattern: 'needle', path: 'src' });
    assert.equal((await h.call('search_files', { pattern: 'needle', path: 'src', offset: 1 }))._warning, undefined);
    await h.call('read_file', { path: 'src/x.txt' });
    assert.equal((await h.call('search_files', { pattern: 'needle', path: 'src', offset: 1 }))._warning, undefined);
    // grep is the same search as content (upstream maps the alias before counting).
    await h.call('other_tool', {});
    await h.call('search_files', { pattern: 'needle', path: 'src' });
    await h.call('search_files', { pattern: 'needle', path: 'src', target: 'grep' });
    assert.equal(
      (await h.registry.dispatch('search_files', { pattern: 'needle', path: 'src' }, h.context)).includes('"_warning"'),
      true,
    );
  });
});
