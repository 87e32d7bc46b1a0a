/**
 * The kit's live link (backends/shared/live-link.ts), on channels made up
 * here: a lost link is replaced once however many callers noticed, an
 * operation that lost its channel before it got anywhere runs once more on
 * the new link, a command's start waits for a replacement and an interrupt
 * ends that wait (the command never starts), and a released link retries
 * nothing and undoes a replacement that finishes late.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FailedPreconditionError } from '../../services/common/errors.js';
import { LiveLink, type ChannelLink, type ReplaceCause } from '../../services/executor/backends/shared/live-link.js';
import {
  SandboxLostError,
  type SandboxChannel,
  type SandboxProcess,
  type SandboxStat,
} from '../../services/executor/backends/shared/sandbox-channel.js';

/** A channel whose file reads answer with its name; `loseNext` makes the next operation fail as a lost stream would, `losing` every one. */
class MadeUpChannel implements SandboxChannel {
  readonly kind = 'agent' as const;
  isLost = false;
  closed = false;
  loseNext = false;
  /** Every operation fails as on a lost stream. */
  losing = false;
  /** What recover() answers: whether the dropped stream is found again. */
  recovers = false;
  readonly spawned: string[] = [];

  constructor(readonly name: string) {}

  #operation(): void {
    if (!this.loseNext && !this.losing) return;
    this.loseNext = false;
    this.isLost = true;
    throw new SandboxLostError(`the exec agent of ${this.name} disconnected`);
  }

  async spawn(options: { readonly script: string }): Promise<SandboxProcess> {
    this.#operation();
    this.spawned.push(options.script);
    return {
      pid: 42,
      exited: Promise.resolve({ code: 0, signal: null }),
      write: async () => undefined,
      closeStdin: async () => undefined,
      kill: async () => undefined,
    };
  }

  async readFile(): Promise<Buffer> {
    this.#operation();
    return Buffer.from(this.name);
  }

  async writeFile(): Promise<void> {}

  async stat(): Promise<SandboxStat> {
    return { exists: false, isDirectory: false, sizeBytes: 0, uid: -1 };
  }

  close(): void {
    this.closed = true;
    this.isLost = true;
  }

  async recover(): Promise<boolean> {
    if (this.recovers) this.isLost = false;
    return this.recovers;
  }
}

type Link = ChannelLink<MadeUpChannel>;

/** A live link on channel `first`, whose replacements are new channels `second`, `third`, ...; when `held`, a replacement waits for `letGo()`. */
function liveLink(first: MadeUpChannel, held = false) {
  const causes: ReplaceCause[] = [];
  const discarded: string[] = [];
  const names = ['second', 'third', 'fourth'];
  let open: () => void = () => undefined;
  const gate = held ? new Promise<void>((resolve) => (open = resolve)) : Promise.resolve();
  const live = new LiveLink<Link>({ description: 'test:task' }, { channel: first }, {
    replace: async (_old, cause) => {
      causes.push(cause);
      await gate;
      return { link: { channel: new MadeUpChannel(names.shift() ?? 'later') }, notices: [], recreated: false };
    },
    discard: async (link) => {
      discarded.push(link.channel.name);
      link.channel.close();
    },
  });
  return { live, causes, discarded, letGo: () => open() };
}

const readName = (link: Link) => link.channel.readFile().then(String);

describe('LiveLink', () => {
  it('replaces a lost link once however many callers notice at the same time', async () => {
    const first = new MadeUpChannel('first');
    const { live, causes } = liveLink(first);
    first.isLost = true;
    const names = await Promise.all([live.withLink(readName), live.withLink(readName), live.ready().then(readName)]);
    assert.deepEqual(names, ['second', 'second', 'second']);
    assert.deepEqual(causes, [{ kind: 'lost', duringCommand: false }]);
    assert.equal(live.link.channel.name, 'second');

    // Operations already under way on a link that is then lost retry on one new link.
    live.link.channel.losing = true;
    const retried = await Promise.all([live.withLink(readName), live.withLink(readName), live.withLink(readName)]);
    assert.deepEqual(retried, ['third', 'third', 'third']);
    assert.equal(causes.length, 2);
  });

  it('runs an operation whose channel was lost before it got anywhere once more, on a new link, and no more', async () => {
    const first = new MadeUpChannel('first');
    const { live, causes } = liveLink(first);
    first.loseNext = true;
    assert.equal(await live.withLink(readName), 'second');
    assert.equal(causes.length, 1);

    // Lost again on the retry too: the loss is the caller's.
    live.link.channel.loseNext = true;
    let calls = 0;
    await assert.rejects(
      live.withLink(async (link) => {
        calls += 1;
        if (calls === 2) link.channel.loseNext = true;
        return readName(link);
      }),
      (err: unknown) => err instanceof SandboxLostError && err.message === 'the exec agent of third disconnected',
    );
    assert.equal(calls, 2);
  });

  it('keeps a channel whose dropped stream was found again instead of replacing it', async () => {
    const first = new MadeUpChannel('first');
    first.recovers = true;
    const { live, causes } = liveLink(first);
    first.loseNext = true;
    assert.equal(await live.withLink(readName), 'first');
    assert.deepEqual(causes, []);
  });

  /** Loses the first channel with `lose`, starts a command, interrupts it while its new link is held, then lets the link go. */
  const interruptWhileReplaced = async (lose: (first: MadeUpChannel) => void) => {
    const first = new MadeUpChannel('first');
    const { live, letGo } = liveLink(first, true);
    lose(first);
    const interrupt = new AbortController();
    const starting = live.startCommand({ script: 'touch /never', timeoutMs: 10_000, signal: interrupt.signal }, '/work', undefined);
    await new Promise((resolve) => setImmediate(resolve));
    interrupt.abort();
    assert.deepEqual(await starting, { ended: { exitCode: 130, timedOut: false, interrupted: true } });
    letGo();
    const next = await live.ready();
    assert.equal(next.channel.name, 'second', 'the replacement went on');
    assert.deepEqual(next.channel.spawned, [], 'the interrupted command never ran');
  };

  it('an interrupt while a replacement is awaited ends the command before it starts; the replacement goes on', async () => {
    await interruptWhileReplaced((first) => (first.isLost = true));
  });

  it('an interrupt while the retry of a lost start waits for the new link ends the command before it starts', async () => {
    await interruptWhileReplaced((first) => (first.loseNext = true));
  });

  it('starts a command on the live channel in the given directory', async () => {
    const first = new MadeUpChannel('first');
    const { live } = liveLink(first);
    first.loseNext = true;
    const start = await live.startCommand({ script: 'echo hi', timeoutMs: 10_000 }, '/work', undefined);
    assert.ok('proc' in start);
    assert.equal(start.link.channel.name, 'second');
    assert.deepEqual(start.link.channel.spawned, ['echo hi']);
  });

  it('once released, retries nothing and undoes a replacement that finishes', async () => {
    const first = new MadeUpChannel('first');
    const { live, discarded, letGo } = liveLink(first, true);
    first.isLost = true;
    const waiting = live.ready();
    live.release();
    letGo();
    await assert.rejects(waiting, new FailedPreconditionError('environment test:task was released'));
    assert.deepEqual(discarded, ['second']);
    assert.equal((await live.settled()).channel.name, 'first');

    const kept = new MadeUpChannel('kept');
    const released = liveLink(kept).live;
    released.release();
    kept.loseNext = true;
    await assert.rejects(released.withLink(readName), SandboxLostError);
  });
});
