/**
 * write_file's refusals and preservation rules over real files: upstream
 * Hermes' argument texts, sensitive system paths, the credential deny list
 * (resolved in the environment, so through symlinks too), read_file display
 * text offered as content, and CRLF/BOM kept on rewrite.
 */
import assert from 'node:assert/strict';
import { lstat, mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import { fileToolRegistrations } from '../../services/dispatcher/tools/file-tools.js';
import type { ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import { LocalTaskClientDouble } from '../fixtures/local-task-client.js';

type Result = Record<string, unknown>;

/**
 * Calls the file tools by name in the context `context()` gives. One set of
 * tools per suite, as the dispatcher registers them once: write_file needs
 * what read_file saw.
 */
function toolCaller(context: () => ToolContext): (name: string, args: Record<string, unknown>) => Promise<Result> {
  const tools = fileToolRegistrations();
  return async (name, args) => {
    const registration = tools.find((reg) => reg.name === name);
    assert.ok(registration);
    return JSON.parse(await registration.handler(args, context())) as Result;
  };
}

describe('write_file guards', () => {
  let task: LocalTaskClientDouble;
  let context: ToolContext;
  const call = toolCaller(() => context);
  const write = (args: Record<string, unknown>) => call('write_file', args);
  const path = (relative: string): string => join(task.root, relative);

  before(async () => {
    // The double's HOME is its root: `~/.ssh` is `<root>/.ssh`.
    task = await LocalTaskClientDouble.create('berth-write-guards-');
    context = { tenant: 't', taskId: 'k', sessionId: 's', task, signal: new AbortController().signal, logger: silentLogger() };
  });
  after(async () => task.dispose());

  it('answers missing and mistyped arguments with upstream texts', async () => {
    assert.deepEqual(await write({ content: 'x' }), {
      error: "write_file: missing required field 'path'. Re-emit the tool call with both 'path' and 'content' set.",
    });
    assert.deepEqual(await write({ path: 'a.txt' }), {
      error:
        "write_file: missing required field 'content'. The tool call included a path but no content argument — this " +
        'is almost always a dropped-arg bug under context pressure. Re-emit the tool call with the full content ' +
        'payload, or use execute_code with hermes_tools.write_file() for very large files.',
    });
    assert.deepEqual(await write({ path: 'a.txt', content: 3 }), { error: "write_file: 'content' must be a string, got int." });
    assert.deepEqual(await write({ path: 'a.txt', content: null }), {
      error: "write_file: 'content' must be a string, got NoneType.",
    });
    assert.deepEqual(await write({ path: 'a.txt', content: ['x'] }), { error: "write_file: 'content' must be a string, got list." });
  });

  it('refuses sensitive system paths, naming the path as given', async () => {
    assert.deepEqual(await write({ path: '/etc/cron.d/job', content: 'x' }), {
      error: 'Refusing to write to sensitive system path: /etc/cron.d/job\nUse the terminal tool with sudo if you need to modify system files.',
    });
    assert.equal(
      (await write({ path: '/run/docker.sock', content: 'x' })).error,
      'Refusing to write to sensitive system path: /run/docker.sock\nUse the terminal tool with sudo if you need to modify system files.',
    );
  });

  it('refuses credential stores under the environment home, also through a symlink', async () => {
    const keys = path('.ssh/authorized_keys');
    assert.deepEqual(await write({ path: '~/.ssh/authorized_keys', content: 'ssh-ed25519 AAAA' }), {
      bytes_written: 0,
      dirs_created: false,
      error: `Write denied: '${keys}' is a protected system/credential file.`,
      resolved_path: keys,
    });
    assert.equal((await write({ path: '.aws/credentials', content: 'x' })).error, `Write denied: '${path('.aws/credentials')}' is a protected system/credential file.`);
    assert.match(String((await write({ path: '.npmrc', content: 'x' })).error), /is a protected system\/credential file\.$/);
    assert.match(String((await write({ path: '.bashrc', content: 'x' })).error), /is a protected system\/credential file\.$/);

    await mkdir(path('proj'));
    await symlink(path('.netrc'), path('proj/innocent.txt'));
    assert.equal(
      (await write({ path: 'proj/innocent.txt', content: 'machine x login y' })).error,
      `Write denied: '${path('proj/innocent.txt')}' is a protected system/credential file.`,
    );
    await assert.rejects(lstat(path('.netrc')));
    // A project's own .npmrc or .ssh directory is not the home's.
    assert.equal((await write({ path: 'proj/.npmrc', content: 'registry=x\n' })).bytes_written, 11);
    assert.equal((await write({ path: 'proj/.ssh/config', content: 'Host x\n' })).bytes_written, 7);
  });

  it('refuses read_file display text as content', async () => {
    const refusal =
      'Refusing to write internal read_file display text as file content. Strip read_file line-number prefixes or ' +
      'reconstruct the intended file contents before writing.';
    assert.deepEqual(await write({ path: 'n.py', content: '1|import os\n2|print(os.getcwd())\n3|' }), { error: refusal });
    assert.deepEqual(
      await write({
        path: 'n.txt',
        content:
          'File unchanged since last read. The content from the earlier read_file result in this conversation is ' +
          'still current — refer to that instead of re-reading.\n',
      }),
      { error: refusal },
    );
    // One numbered line, or numbers that do not run on, are ordinary content.
    assert.equal((await write({ path: 'ok1.txt', content: '1|value\nother\n' })).error, undefined);
    assert.equal((await write({ path: 'ok2.txt', content: '3|a\n7|b\n' })).error, undefined);
  });

  it('refuses content with a lone surrogate instead of writing a replacement character', async () => {
    const abs = path('s.txt');
    // What a model sends as the JSON escape \ud800 with no low surrogate after it.
    assert.deepEqual(await write({ path: 's.txt', content: JSON.parse('"a\\ud800b"') as string }), {
      bytes_written: 0,
      dirs_created: false,
      error: `Refusing to write '${abs}': content contains a lone surrogate character ('\\ud800') that cannot be encoded as UTF-8. The file was NOT created or modified.`,
      resolved_path: abs,
    });
    await assert.rejects(lstat(abs));
    assert.equal((await write({ path: 's.txt', content: 'emoji 😀\n' })).bytes_written, 11);
  });

  it('refuses JSON, YAML and TOML that do not parse, creating and changing nothing', async () => {
    const abs = path('conf/settings.json');
    assert.deepEqual(await write({ path: 'conf/settings.json', content: '{"a": 1,}' }), {
      bytes_written: 0,
      dirs_created: false,
      error:
        `Refusing to write '${abs}': candidate content fails .json syntax validation (SyntaxError: Expected ` +
        'double-quoted property name in JSON at position 8). The file was NOT created or modified. Fix the content ' +
        'and retry.',
      resolved_path: abs,
    });
    await assert.rejects(lstat(path('conf')), 'not even the parent directory is created');

    await writeFile(path('ci.yml'), 'on: push\n');
    const yaml = await write({ path: 'ci.yml', content: 'jobs:\n  build:\n    steps: [\n' });
    assert.match(String(yaml.error), /^Refusing to write '.*\/ci\.yml': candidate content fails \.yml syntax validation \(YAMLParseError: /);
    assert.equal(await readFile(path('ci.yml'), 'utf8'), 'on: push\n');
    const toml = await write({ path: 'Cargo.TOML', content: '[package]\nname = \n' });
    assert.match(String(toml.error), /candidate content fails \.toml syntax validation \(TomlError: Invalid TOML document: invalid value/);

    // What upstream's parsers accept is written: empty YAML and TOML, NaN in JSON, YAML tags and documents.
    assert.equal((await write({ path: 'empty.yaml', content: '' })).bytes_written, 0);
    assert.equal((await write({ path: 'empty.toml', content: '# later\n' })).error, undefined);
    assert.equal((await write({ path: 'nan.json', content: '{"x": NaN}' })).error, undefined);
    assert.equal((await write({ path: 'cf.yaml', content: 'a: !Ref b\n---\nc: 1\n' })).error, undefined);
    assert.match(String((await write({ path: 'empty.json', content: '' })).error), /fails \.json syntax validation \(SyntaxError: Unexpected end of JSON input\)/);
    // Other extensions are not parsed.
    assert.equal((await write({ path: 'notes.txt', content: '{' })).bytes_written, 1);
  });

  it('checks structure after the lone-surrogate refusal and before the BOM and CRLF of the old file are applied', async () => {
    assert.match(String((await write({ path: 'x.json', content: JSON.parse('"{\\ud800"') as string })).error), /lone surrogate/);
    await writeFile(path('bom.json'), '\ufeff{"old": true}\r\n');
    await call('read_file', { path: 'bom.json' });
    assert.equal((await write({ path: 'bom.json', content: '{"new": true}\n' })).error, undefined);
    assert.equal(await readFile(path('bom.json'), 'utf8'), '\ufeff{"new": true}\r\n');
  });

  it('keeps CRLF line endings and a UTF-8 BOM of the file it replaces', async () => {
    await writeFile(path('win.txt'), '\ufeffone\r\ntwo\r\n');
    await call('read_file', { path: 'win.txt' });
    const result = await write({ path: 'win.txt', content: 'uno\ndos\ntres\n' });
    assert.equal(result.bytes_written, 3 + 'uno\r\ndos\r\ntres\r\n'.length);
    assert.equal(await readFile(path('win.txt'), 'utf8'), '\ufeffuno\r\ndos\r\ntres\r\n');
    // Content already carrying the BOM gets no second one; an LF file stays LF.
    await write({ path: 'win.txt', content: '\ufeffsolo\n' });
    assert.equal(await readFile(path('win.txt'), 'utf8'), '\ufeffsolo\r\n');
    await writeFile(path('unix.txt'), 'a\nb\n');
    await call('read_file', { path: 'unix.txt' });
    await write({ path: 'unix.txt', content: 'c\r\nd\n' });
    assert.equal(await readFile(path('unix.txt'), 'utf8'), 'c\r\nd\n');
  });
});

describe('write_file over an existing file: a current, full view first (upstream #65604)', () => {
  let task: LocalTaskClientDouble;
  let context: ToolContext;
  const call = toolCaller(() => context);
  const path = (relative: string): string => join(task.root, relative);
  const unseen = (given: string) =>
    `Refusing to overwrite ${given}: ${path(given)} exists but this task has not seen its full current content (never ` +
    'read, only patched, or only a redacted/partial view). Read the file — every page of it, if it needs ' +
    'offset/limit — or use patch for a targeted edit; a stale conversation copy must not overwrite the current disk ' +
    'content. The file was NOT modified. Reload the current contents with read_file (every page, for a file that ' +
    'needs offset/limit), merge the requested change, then call write_file again. For small edits, prefer patch so ' +
    'existing unrelated changes are preserved.';

  before(async () => {
    task = await LocalTaskClientDouble.create('berth-write-views-');
    context = { tenant: 't', taskId: 'k', sessionId: 's', task, signal: new AbortController().signal, logger: silentLogger() };
  });
  after(async () => task.dispose());

  it('refuses a file this task never read, with upstream\'s texts, and leaves it untouched', async () => {
    await writeFile(path('notes.txt'), 'mine\n');
    assert.deepEqual(await call('write_file', { path: 'notes.txt', content: 'yours\n' }), {
      error: unseen('notes.txt'),
      stale_write_blocked: true,
      path: 'notes.txt',
      resolved_path: path('notes.txt'),
    });
    assert.equal(await readFile(path('notes.txt'), 'utf8'), 'mine\n');
    await call('read_file', { path: 'notes.txt' });
    assert.equal((await call('write_file', { path: 'notes.txt', content: 'yours\n' })).bytes_written, 6);
    // Its own write is a full view: writing again needs no read.
    assert.equal((await call('write_file', { path: 'notes.txt', content: 'again\n' })).bytes_written, 6);
  });

  it('counts pages read contiguously to the last line, not a part', async () => {
    await writeFile(path('paged.txt'), 'a\nb\nc\nd\n');
    await call('read_file', { path: 'paged.txt', limit: 2 });
    assert.equal((await call('write_file', { path: 'paged.txt', content: 'x\n' })).stale_write_blocked, true);
    await call('read_file', { path: 'paged.txt', offset: 4, limit: 1 });
    assert.equal((await call('write_file', { path: 'paged.txt', content: 'x\n' })).stale_write_blocked, true, 'a gap');
    await call('read_file', { path: 'paged.txt', offset: 3, limit: 2 });
    assert.equal((await call('write_file', { path: 'paged.txt', content: 'x\n' })).error, undefined);
  });

  it('refuses when the file changed on disk since it was read', async () => {
    await writeFile(path('moving.txt'), 'one\n');
    await call('read_file', { path: 'moving.txt' });
    await writeFile(path('moving.txt'), 'two\n');
    const refused = await call('write_file', { path: 'moving.txt', content: 'three\n' });
    assert.equal(
      refused.error,
      `Refusing to overwrite moving.txt: ${path('moving.txt')} was modified since you last read it on disk (external ` +
        'edit or unrecorded writer). Re-read the file before writing. The file was NOT modified. Reload the current ' +
        'contents with read_file (every page, for a file that needs offset/limit), merge the requested change, then ' +
        'call write_file again. For small edits, prefer patch so existing unrelated changes are preserved.',
    );
    assert.equal(await readFile(path('moving.txt'), 'utf8'), 'two\n');
  });

  it('needs a fresh read after a patch, or after a read whose secrets were masked', async () => {
    await writeFile(path('patched.py'), 'x = 1\n');
    await call('read_file', { path: 'patched.py' });
    assert.equal((await call('patch', { path: 'patched.py', old_string: 'x = 1', new_string: 'x = 2' })).success, true);
    assert.equal((await call('write_file', { path: 'patched.py', content: 'x = 3\n' })).stale_write_blocked, true);

    await writeFile(path('config.sh'), `export GITHUB_TOKEN=ghp_${'a'.repeat(36)}\n`);
    const masked = await call('read_file', { path: 'config.sh' });
    assert.doesNotMatch(String(masked.content), /a{36}/);
    assert.equal((await call('write_file', { path: 'config.sh', content: 'export X=1\n' })).stale_write_blocked, true);

    // A line cut at the display width was not seen whole either.
    await writeFile(path('wide.txt'), `${'w'.repeat(3000)}\n`);
    await call('read_file', { path: 'wide.txt' });
    assert.equal((await call('write_file', { path: 'wide.txt', content: 'narrow\n' })).stale_write_blocked, true);
  });

  it('lets a new file, and an empty one, be written without reading', async () => {
    assert.equal((await call('write_file', { path: 'fresh/new.txt', content: 'n\n' })).bytes_written, 2);
    await writeFile(path('empty.txt'), '');
    assert.equal((await call('write_file', { path: 'empty.txt', content: 'e\n' })).bytes_written, 2);
  });
});
