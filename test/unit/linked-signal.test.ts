/**
 * linkSignals (linked-signal.ts), what the per-call path uses in place of
 * AbortSignal.any: the linked signal aborts with the first source's reason,
 * an aborted source gives an aborted signal at once, and once the call is
 * done its sources no longer reach it (nor hold a listener of it).
 */
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { describe, it } from 'node:test';
import { linkSignals } from '../../services/common/linked-signal.js';

describe('linkSignals', () => {
  it('aborts with the reason of whichever source aborts first, and only once', () => {
    const server = new AbortController();
    const call = new AbortController();
    const linked = linkSignals(call.signal, undefined, server.signal);
    assert.equal(linked.signal.aborted, false);
    const first = new Error('shutting down');
    server.abort(first);
    assert.equal(linked.signal.aborted, true);
    assert.equal(linked.signal.reason, first);
    call.abort(new Error('later'));
    assert.equal(linked.signal.reason, first);
    // The other source no longer holds a listener of the linked signal.
    assert.equal(getEventListeners(call.signal, 'abort').length, 0);
  });

  it('is aborted at once when a source already is', () => {
    const reason = new Error('gone');
    const linked = linkSignals(new AbortController().signal, AbortSignal.abort(reason));
    assert.equal(linked.signal.aborted, true);
    assert.equal(linked.signal.reason, reason);
  });

  it('gives a single source back as it is, and a signal that never aborts for none', () => {
    const only = new AbortController().signal;
    assert.equal(linkSignals(undefined, only).signal, only);
    assert.equal(linkSignals(undefined).signal.aborted, false);
  });

  it('no longer follows its sources once done, and leaves no listener on a long-lived one', () => {
    const server = new AbortController();
    const before = getEventListeners(server.signal, 'abort').length;
    const linked = linkSignals(new AbortController().signal, server.signal);
    assert.equal(getEventListeners(server.signal, 'abort').length, before + 1);
    linked.done();
    assert.equal(getEventListeners(server.signal, 'abort').length, before);
    server.abort();
    assert.equal(linked.signal.aborted, false);
  });
});
