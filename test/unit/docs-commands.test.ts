/**
 * Every command the docs show is run by a test, or says which test runs it,
 * or says why it cannot run here: no silent gaps. And the comparison the
 * runner uses can fail.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { commandBlocks, type FencedBlock } from '../support/markdown-docs.js';
import { blockCommands, commandWords, uncoveredWords } from '../support/doc-command-words.js';
import { outputMismatch, parseConsole, substituteIds, type IdMap } from '../support/doc-console.js';
import { REPO_ROOT } from '../support/serve-process.js';

describe('documentation command blocks', () => {
  const blocks = commandBlocks();

  test('every sh/console block says how it is tested: run, covered by a test that exists, or not run with the reason', () => {
    const problems: string[] = [];
    for (const { file, block, test: how } of blocks) {
      const at = `${file}:${block.line}`;
      if (how.kind === 'missing') problems.push(`${at}: no <!-- doc-test: ... --> comment above the block`);
      if (how.kind === 'malformed') problems.push(`${at}: '${how.note}' is not run, covered by PATH, or not run: REASON`);
      if (how.kind === 'covered') {
        for (const p of how.paths) if (!existsSync(join(REPO_ROOT, p))) problems.push(`${at}: covered by ${p}, which does not exist`);
      }
      if (how.kind === 'not-run' && how.reason.length < 12) problems.push(`${at}: '${how.reason}' does not say why`);
    }
    assert.deepEqual(problems, []);
  });

  test('a block covered by a test is run by it: the test names each command, subcommand, long flag and variable the block shows', () => {
    const problems: string[] = [];
    for (const { file, block, test: how } of blocks) {
      if (how.kind !== 'covered') continue;
      const paths = how.paths.filter((p) => existsSync(join(REPO_ROOT, p)));
      const sources = paths.map((p) => readFileSync(join(REPO_ROOT, p), 'utf8'));
      for (const missing of uncoveredWords(file, block, sources)) problems.push(`${file}:${block.line}: ${paths.join(', ')} never names ${missing}`);
    }
    assert.deepEqual(problems, []);
  });

  test('blocks marked run are ones the runner can run: console blocks of commands, nothing left running in the background', () => {
    const run = blocks.filter((b) => b.test.kind === 'run');
    assert.ok(run.length >= 5, `only ${run.length} blocks are run`);
    for (const { file, block } of run) {
      if (block.lang === 'console') assert.ok(parseConsole(block.body).length > 0, `${file}:${block.line}`);
      assert.doesNotMatch(block.body, /&\s*$/m, `${file}:${block.line}: a background command would outlive the test`);
    }
  });
});

describe('what a covering test must name', () => {
  const sh = (body: string): FencedBlock => ({ lang: 'sh', body, line: 1, note: undefined });

  test('programs, subcommands, long flags and variables, not the plumbing, a here-document or a comment', () => {
    assert.deepEqual(commandWords(`FOO=1 bin/berth call terminal '{"command":"echo a | b"}' --task t1 --json=x # not --this`), [
      'FOO',
      'berth',
      'call',
      '--task',
      '--json',
    ]);
    assert.deepEqual(commandWords('sudo docker-compose -f deploy/compose.yaml up -d > out.log 2>&1 && grep -q ok out.log || exit 1'), ['docker-compose', 'up']);
    assert.deepEqual(commandWords('export KEY=$(openssl rand -hex 16); cd x && make lint'), ['make', 'lint']);
    const script = sh("set -e\ncat > c.yaml <<'YAML'\nkey: value\nYAML\nberth serve \\\n  --port 0 &\nwait");
    assert.deepEqual(blockCommands(script).map(commandWords), [[], [], ['berth', 'serve', '--port'], []]);
  });

  test('a word the test does not name is reported, one inside a longer name does not count, and a test reading the block covers it', () => {
    const block = sh('berth snapshot base --label x');
    assert.deepEqual(uncoveredWords('docs/x.md', block, ["cli(['snapshot', 'base', '--label', 'deps'])", '// berth']), []);
    assert.deepEqual(uncoveredWords('docs/x.md', block, ["cli(['snapshot-list', '--labels'])", 'berth']), [
      "'snapshot' of `berth snapshot base --label x`",
      "'--label' of `berth snapshot base --label x`",
    ]);
    assert.deepEqual(uncoveredWords('docs/x.md', block, ["const [b] = fencedBlocks('docs/x.md')"]), []);
  });
});

describe('the runner\'s comparison', () => {
  test('parses commands, continuation lines and their output', () => {
    assert.deepEqual(parseConsole('$ echo a \\\n  b\na b\n$ true\n'), [
      { command: 'echo a \\\n  b', expected: ['a b'] },
      { command: 'true', expected: [] },
    ]);
    assert.throws(() => parseConsole('output before any command'), /must start with a '\$ ' command/);
  });

  test('a different line, a missing line or an extra line is a mismatch', () => {
    const ids: IdMap = new Map();
    assert.equal(outputMismatch(['hello'], 'hello\n', ids), undefined);
    assert.match(outputMismatch(['hello'], 'hullo\n', ids) ?? '', /expected "hello"/);
    assert.match(outputMismatch(['a', 'b'], 'a\n', ids) ?? '', /the output ended/);
    assert.match(outputMismatch(['a'], 'a\nb\n', ids) ?? '', /the output goes on/);
    assert.equal(outputMismatch(['a', '...', 'z'], 'a\nb\nc\nz\n', ids), undefined);
    assert.equal(outputMismatch([], '', ids), undefined);
  });

  test('JSON is compared by value; run-to-run values by form only; ids carry into later commands', () => {
    const ids: IdMap = new Map();
    const page = '{"output":"Background process started","session_id":"proc_9079d95fb3c3","pid":20103,"exit_code":0}';
    assert.equal(outputMismatch([page], '{"exit_code":0,"pid":5,"session_id":"proc_0123456789ab","output":"Background process started"}\n', ids), undefined);
    assert.equal(ids.get('proc_9079d95fb3c3'), 'proc_0123456789ab');
    assert.equal(substituteIds(`'{"action":"wait","session_id":"9079"}'`, ids), `'{"action":"wait","session_id":"0123"}'`);
    assert.match(outputMismatch([page], '{"output":"Background process started","session_id":"p1","pid":5,"exit_code":0}', ids) ?? '', /session_id/);
    assert.match(outputMismatch(['{"exit_code":0}'], '{"exit_code":1}', ids) ?? '', /\$\.exit_code: expected 0, got 1/);
    assert.match(outputMismatch(['{"a":1}'], '{"a":1,"b":2}', ids) ?? '', /\$\.b: in the output/);
  });
});
