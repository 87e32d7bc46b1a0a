/**
 * The repeated read/search guard on its own (counting, dedup verdicts,
 * resets, bounds) and the registry hook that tells it about every call.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskClient } from '../../services/common/task-client.js';
import { ToolRegistry } from '../../services/dispatcher/registry/registry.js';
import { FileLoopGuard, readRegionKey } from '../../services/dispatcher/tools/file/loop-guard.js';
import { searchCallKey, withKeyAdded } from '../../services/dispatcher/tools/file-tools.js';
import type { ToolCallObserver, ToolContext } from '../../services/dispatcher/registry/tool-types.js';

function contextFor(taskId: string, sessionId = 's', tenant = 't'): ToolContext {
  return {
    tenant,
    taskId,
    sessionId,
    task: {} as TaskClient,
    signal: new AbortController().signal,
    logger: silentLogger(),
  };
}

describe('FileLoopGuard', () => {
  it('counts identical reads in a row; a search or another tool breaks the streak', () => {
    const guard = new FileLoopGuard();
    const c = contextFor('a');
    assert.deepEqual([1, 2, 3].map(() => guard.recordRead(c, 'k', 'r', undefined)), [1, 2, 3]);
    assert.equal(guard.recordSearch(c, 'k'), 1);
    assert.equal(guard.recordRead(c, 'k', 'r', undefined), 1);
    guard.recordRead(c, 'k', 'r', undefined);
    guard.toolCalled('terminal', c);
    assert.equal(guard.recordRead(c, 'k', 'r', undefined), 1);
    // The two tracked tools do not reset anything by being called.
    guard.toolCalled('read_file', c);
    guard.toolCalled('search_files', c);
    assert.equal(guard.recordRead(c, 'k', 'r', undefined), 2);
  });

  it('gives unchanged then blocked for a region read before with the same fingerprint', () => {
    const guard = new FileLoopGuard();
    const c = contextFor('a');
    const region = readRegionKey('/w/a.txt', 1, 500);
    assert.equal(guard.checkDedup(c, region, 'f1'), undefined);
    guard.recordRead(c, 'k', region, 'f1');
    assert.equal(guard.checkDedup(c, region, 'f2'), undefined);
    assert.deepEqual(guard.checkDedup(c, region, 'f1'), { kind: 'unchanged' });
    assert.deepEqual(guard.checkDedup(c, region, 'f1'), { kind: 'blocked', count: 3 });
    assert.deepEqual(guard.checkDedup(c, region, 'f1'), { kind: 'blocked', count: 4 });
    guard.toolCalled('patch', c);
    assert.deepEqual(guard.checkDedup(c, region, 'f1'), { kind: 'unchanged' });
    guard.forgetPath(c, '/w/a.txt');
    assert.equal(guard.checkDedup(c, region, 'f1'), undefined);
    guard.recordRead(c, 'k', region, 'f1');
    guard.forgetAllPaths(c);
    assert.equal(guard.checkDedup(c, region, 'f1'), undefined);
  });

  it('keeps tenants, tasks and sessions apart and forgets every session of an ended task', () => {
    const guard = new FileLoopGuard();
    const region = readRegionKey('/w/a', 1, 1);
    for (const c of [contextFor('a'), contextFor('a', 's2'), contextFor('b'), contextFor('a', 's', 'other')]) {
      guard.recordRead(c, 'k', region, 'f');
    }
    guard.taskEnded('t', 'a');
    assert.equal(guard.checkDedup(contextFor('a'), region, 'f'), undefined);
    assert.equal(guard.checkDedup(contextFor('a', 's2'), region, 'f'), undefined);
    assert.deepEqual(guard.checkDedup(contextFor('b'), region, 'f'), { kind: 'unchanged' });
    assert.deepEqual(guard.checkDedup(contextFor('a', 's', 'other'), region, 'f'), { kind: 'unchanged' });
  });

  it('stays bounded: least recently used tasks and oldest regions go first', () => {
    const guard = new FileLoopGuard({ maxTasks: 2, maxDedupEntries: 2 });
    const [a, b, c] = [contextFor('a'), contextFor('b'), contextFor('c')];
    guard.recordRead(a, 'k', 'r', 'f');
    guard.recordRead(b, 'k', 'r', 'f');
    assert.deepEqual(guard.checkDedup(a, 'r', 'f'), { kind: 'unchanged' }); // a is now the most recent
    guard.recordRead(c, 'k', 'r', 'f'); // evicts b
    assert.equal(guard.checkDedup(b, 'r', 'f'), undefined);
    assert.deepEqual(guard.checkDedup(c, 'r', 'f'), { kind: 'unchanged' });

    for (const region of ['r1', 'r2', 'r3']) guard.recordRead(c, region, region, 'f');
    assert.equal(guard.checkDedup(c, 'r1', 'f'), undefined);
    assert.deepEqual(guard.checkDedup(c, 'r3', 'f'), { kind: 'unchanged' });
  });
});

describe('search key and result decoration', () => {
  it('normalises the search the way upstream counts it', () => {
    assert.equal(searchCallKey({ pattern: 'x' }), searchCallKey({ pattern: 'x', target: 'grep', path: '.', limit: 50, offset: 0 }));
    assert.equal(searchCallKey({ pattern: 'x', target: 'find' }), searchCallKey({ pattern: 'x', target: 'files' }));
    assert.notEqual(searchCallKey({ pattern: 'x' }), searchCallKey({ pattern: 'x', offset: 50 }));
    assert.notEqual(searchCallKey({ pattern: 'x' }), searchCallKey({ pattern: 'x', file_glob: '*.ts' }));
    assert.notEqual(searchCallKey({ pattern: 'x', target: 'files' }), searchCallKey({ pattern: 'x', target: 'files', order: 'modified' }));
    assert.equal(searchCallKey({ pattern: 'x', path: ' ' }), searchCallKey({ pattern: 'x', path: '.' }));
  });

  it('adds a key to a JSON result, before the truncation _hint that upstream puts last', () => {
    assert.equal(withKeyAdded('{"total_count":1}', '_warning', 'w'), '{"total_count":1,"_warning":"w"}');
    assert.equal(
      withKeyAdded('{"total_count":9,"truncated":true,"_hint":"Results truncated."}', '_warning', 'w'),
      '{"total_count":9,"truncated":true,"_warning":"w","_hint":"Results truncated."}',
    );
    assert.equal(withKeyAdded('{"a":"x\\n\\ny"}', 'b', 1), '{"a":"x\\n\\ny","b":1}');
    assert.equal(withKeyAdded('not json', 'b', 1), 'not json');
  });
});

describe('ToolRegistry call observers', () => {
  it('tells each distinct observer about every dispatched call and about ended tasks', async () => {
    const seen: string[] = [];
    const observer: ToolCallObserver = {
      toolCalled: (name, context) => seen.push(`${name}@${context.taskId}`),
      taskEnded: (tenant, taskId) => seen.push(`end ${tenant}/${taskId}`),
    };
    const registry = new ToolRegistry({ logger: silentLogger() });
    const params = { type: 'object', properties: {} };
    for (const name of ['one', 'two']) {
      registry.register({
        name,
        toolset: 'x',
        schema: { name, description: name, parameters: params },
        handler: () => '{}',
        callObserver: observer,
      });
    }
    registry.register({
      name: 'plain',
      toolset: 'x',
      schema: { name: 'plain', description: 'p', parameters: params },
      handler: () => '{}',
    });
    await registry.dispatch('plain', {}, contextFor('a'));
    await registry.dispatch('one', {}, contextFor('b'));
    await registry.dispatch('missing', {}, contextFor('c'));
    registry.taskEnded('t', 'a');
    assert.deepEqual(seen, ['plain@a', 'one@b', 'end t/a']);

    registry.unregister('one');
    registry.unregister('two');
    await registry.dispatch('plain', {}, contextFor('d'));
    assert.deepEqual(seen, ['plain@a', 'one@b', 'end t/a']);
  });

  it('keeps dispatching when an observer throws', async () => {
    const registry = new ToolRegistry({ logger: silentLogger() });
    registry.register({
      name: 'one',
      toolset: 'x',
      schema: { name: 'one', description: 'one', parameters: { type: 'object', properties: {} } },
      handler: () => '{"ok":true}',
      callObserver: {
        toolCalled: () => {
          throw new Error('boom');
        },
        taskEnded: () => {
          throw new Error('boom');
        },
      },
    });
    assert.equal(await registry.dispatch('one', {}, contextFor('a')), '{"ok":true}');
    registry.taskEnded('t', 'a');
  });
});
