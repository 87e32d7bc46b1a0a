import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ProcessWatch } from '../../services/executor/process-watch.js';
import { WatchBreaker } from '../../services/executor/watch-breaker.js';

const T0 = 1_000_000;

describe('ProcessWatch: which lines hit', () => {
  it('reports every matching line of a chunk, the first pattern of the first line, ANSI stripped and right-trimmed', () => {
    const watch = new ProcessWatch(['ERROR', 'READY']);
    const outcome = watch.scan('boot\nserver READY  \n\x1b[31mERROR\x1b[0m one\nfine\nERROR two READY\n', T0);
    assert.deepEqual(outcome, {
      kind: 'match',
      pattern: 'READY',
      output: 'server READY\nERROR one\nERROR two READY',
      suppressed: 0,
      lifetimeExhausted: false,
    });
  });

  it('judges a line that arrives over several chunks whole, and reports it once', () => {
    const watch = new ProcessWatch(['READY']);
    assert.deepEqual(watch.scan('server REA', T0), { kind: 'none' });
    const hit = watch.scan('DY on 8080', T0 + 1);
    assert.equal(hit.kind, 'match');
    assert.equal(hit.kind === 'match' ? hit.output : '', 'server READY on 8080');
    // The rest of the same line, and its end, are not a second hit.
    assert.deepEqual(watch.scan(' and more\n', T0 + 20_000), { kind: 'none' });
    assert.deepEqual(watch.scan('plain\n', T0 + 40_000), { kind: 'none' });
  });

  it('caps a notification at 20 lines and 2,000 characters', () => {
    const many = new ProcessWatch(['x']);
    const lines = Array.from({ length: 25 }, (_, i) => `x${i}`);
    const first = many.scan(`${lines.join('\n')}\n`, T0);
    assert.equal(first.kind === 'match' ? first.output : '', lines.slice(0, 20).join('\n'));

    const long = new ProcessWatch(['x']);
    const wide = long.scan(`${'x'.repeat(1500)}\n${'x'.repeat(1500)}\n`, T0);
    assert.equal(wide.kind === 'match' ? wide.output : '', `${'x'.repeat(1500)}\n${'x'.repeat(499)}\n...(truncated)`);
  });

  it('ignores empty patterns', () => {
    const watch = new ProcessWatch(['', 'go']);
    assert.deepEqual(watch.patterns, ['go']);
    assert.equal(new ProcessWatch(['']).active, false);
  });
});

describe('ProcessWatch: rate limits', () => {
  it('delivers one match per 15 s window and counts the dropped lines', () => {
    const watch = new ProcessWatch(['hit']);
    assert.equal(watch.scan('hit 1\n', T0).kind, 'match');
    assert.deepEqual(watch.scan('hit 2\nhit 3\n', T0 + 5000), { kind: 'none' });
    const next = watch.scan('hit 4\n', T0 + 15_000);
    assert.deepEqual(next, { kind: 'match', pattern: 'hit', output: 'hit 4', suppressed: 2, lifetimeExhausted: false });
  });

  it('three consecutive strike windows disable watching, with the dropped count and upstream\'s reason', () => {
    const watch = new ProcessWatch(['hit']);
    let now = T0;
    assert.equal(watch.scan('hit\n', now).kind, 'match');
    // Window 1: a drop (strike 1); a second drop in the same window is no new strike.
    assert.equal(watch.scan('hit\n', (now += 1000)).kind, 'none');
    assert.equal(watch.scan('hit\n', (now += 1000)).kind, 'none');
    // Window 2: delivered, then a drop (strike 2).
    assert.equal(watch.scan('hit\n', (now += 15_000)).kind, 'match');
    assert.equal(watch.scan('hit\n', (now += 1000)).kind, 'none');
    // Window 3: delivered, then the third strike.
    assert.equal(watch.scan('hit\n', (now += 15_000)).kind, 'match');
    // The drops since the last delivered match: both lines of this chunk.
    assert.deepEqual(watch.scan('hit\nhit\n', (now += 1000)), {
      kind: 'disabled',
      suppressed: 2,
      why: '3 consecutive rate-limit windows triggered (min spacing 15s). ',
    });
    assert.equal(watch.active, false);
    assert.deepEqual(watch.scan('hit\n', (now += 60_000)), { kind: 'none' });
  });

  it('a window that ended without drops resets the strikes', () => {
    const watch = new ProcessWatch(['hit']);
    let now = T0;
    watch.scan('hit\n', now);
    watch.scan('hit\n', (now += 1000)); // strike 1
    watch.scan('hit\n', (now += 15_000)); // delivered
    watch.scan('hit\n', (now += 1000)); // strike 2
    watch.scan('hit\n', (now += 15_000)); // delivered; this window stays clean
    watch.scan('hit\n', (now += 20_000)); // delivered: the clean window reset the count
    assert.equal(watch.scan('hit\n', (now += 1000)).kind, 'none'); // strike 1 again, not 3
    assert.equal(watch.active, true);
  });

  it('the 8th delivered match is the last', () => {
    const watch = new ProcessWatch(['hit']);
    const outcomes = Array.from({ length: 8 }, (_, i) => watch.scan(`hit ${i}\n`, T0 + i * 20_000));
    assert.deepEqual(
      outcomes.map((o) => (o.kind === 'match' ? o.lifetimeExhausted : o.kind)),
      [false, false, false, false, false, false, false, true],
    );
    assert.equal(watch.active, false);
    assert.equal(watch.lifetimeCapWhy(), 'reached the lifetime cap of 8 delivered matches. ');
    assert.deepEqual(watch.scan('hit 9\n', T0 + 500_000), { kind: 'none' });
  });
});

describe('WatchBreaker', () => {
  it('lets 15 matches through in 10 s, trips on the 16th for 30 s, then says how many it dropped', () => {
    const breaker = new WatchBreaker();
    for (let i = 0; i < 15; i++) assert.deepEqual(breaker.admit(T0 + i), { admit: true, events: [] });
    assert.deepEqual(breaker.admit(T0 + 100), {
      admit: false,
      events: [
        {
          session_id: '',
          command: '',
          type: 'watch_overflow_tripped',
          message:
            'Watch-pattern overflow: >15 notifications in 10s across all processes. ' +
            'Suppressing further watch_match events for 30s.',
        },
      ],
    });
    assert.deepEqual(breaker.admit(T0 + 20_000), { admit: false, events: [] });
    assert.deepEqual(breaker.admit(T0 + 30_100), {
      admit: true,
      events: [
        {
          session_id: '',
          command: '',
          type: 'watch_overflow_released',
          suppressed: 2,
          message: 'Watch-pattern notifications resumed. 2 match event(s) were suppressed during the flood.',
        },
      ],
    });
  });

  it('starts a fresh window after 10 s', () => {
    const breaker = new WatchBreaker();
    for (let i = 0; i < 15; i++) breaker.admit(T0);
    assert.equal(breaker.admit(T0 + 10_000).admit, true);
  });
});
