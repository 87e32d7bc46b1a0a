/**
 * Per-pod uids on the kubernetes backend (pod-uids.ts): the range of
 * `kubernetes.task_uids`, a task's candidates, the `berth.dev/uid` labels of
 * the namespace's pods and claims as the record that other tasks' uids are
 * checked against, and the uid a task's claims record kept for its next pod.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1ObjectMeta } from '@kubernetes/client-node';
import { FailedPreconditionError, InvalidArgumentError, ResourceExhaustedError } from '../../services/common/errors.js';
import { LABEL, type PodIdentity } from '../../services/executor/backends/kubernetes/pod-spec.js';
import { PodUids, podUidRange } from '../../services/executor/backends/kubernetes/pod-uids.js';
import { candidateUid } from '../../services/executor/backends/shared/task-uid-range.js';

/** A namespace's pods and claims by their labels; answers label selectors of one `k=v`, as PodUids asks. */
function namespace(pods: Array<Record<string, string>>, claims: Array<Record<string, string>> = []) {
  const calls: string[] = [];
  const select = (objects: Array<Record<string, string>>, selector: string) => {
    const [k, v] = selector.split('=') as [string, string];
    return objects.filter((labels) => labels[k] === v).map((labels) => ({ metadata: { labels } as V1ObjectMeta }));
  };
  return {
    calls,
    api: {
      listPods: async (selector: string) => {
        calls.push(`pods ${selector}`);
        return select(pods, selector);
      },
      listClaims: async (selector: string) => {
        calls.push(`claims ${selector}`);
        return select(claims, selector);
      },
    },
  };
}

const take = (uids: PodUids, seed: string, task?: string, recorded?: string) =>
  uids.with(seed, task, recorded, async (identity: PodIdentity) => identity);

describe('kubernetes.task_uids', () => {
  test('the default range is docker\'s; with user_namespace it fits a pod\'s 65536 mapped ids; a bad one names the key', () => {
    assert.deepEqual(podUidRange('', false), { first: 1_900_000_000, last: 1_916_777_215 });
    assert.deepEqual(podUidRange('', true), { first: 10_000, last: 65_533 });
    assert.deepEqual(podUidRange('20000-30000', true), { first: 20_000, last: 30_000 });
    assert.throws(() => podUidRange('1900000000-1916777215', true), (err: unknown) =>
      err instanceof FailedPreconditionError && /^kubernetes\.task_uids \(1900000000-1916777215\) does not fit kubernetes\.user_namespace/.test(err.message));
    assert.throws(() => podUidRange('500-2000', false), (err: unknown) =>
      err instanceof InvalidArgumentError && err.message === 'kubernetes.task_uids: "500-2000" holds uid 1000, the image\'s own sandbox user');
  });

  test('a new pod takes its task\'s first candidate, its own ids, labelled nowhere else yet', async () => {
    const { api, calls } = namespace([]);
    const uids = new PodUids({ api });
    const first = candidateUid(uids.range, 'task-a', 0);
    assert.deepEqual(await take(uids, 'task-a', 'task-a'), { uid: first, gid: first, own: true });
    assert.deepEqual(calls, [`pods ${LABEL.uid}=${first}`, `claims ${LABEL.uid}=${first}`]);
    assert.deepEqual(await take(uids, 'task-a', 'task-a'), { uid: first, gid: first, own: true }, 'the same on every executor, once the first pod is made');
  });

  test('a uid another task\'s pod or claim (or a warm pod) is labelled with is skipped; the task\'s own are not in the way', async () => {
    const range = podUidRange('', false);
    const [c0, c1, c2] = [0, 1, 2].map((n) => candidateUid(range, 'task-b', n)) as [number, number, number];
    const { api } = namespace(
      [
        { [LABEL.uid]: String(c0), [LABEL.task]: 'other-task' },
        { [LABEL.uid]: String(c2), [LABEL.task]: 'task-b' },
      ],
      [{ [LABEL.uid]: String(c1), [LABEL.task]: 'another-task' }],
    );
    const uids = new PodUids({ api });
    assert.equal((await take(uids, 'task-b', 'task-b')).uid, c2, 'c0 is another task\'s pod\'s, c1 another task\'s claim\'s; c2 is task-b\'s own old pod\'s');
    // A warm pod belongs to no task yet: every labelled uid is someone's.
    const warm = namespace([{ [LABEL.uid]: String(candidateUid(range, 'berth-warm-1', 0)), [LABEL.pool]: 'warm' }]);
    assert.equal((await take(new PodUids({ api: warm.api }), 'berth-warm-1', undefined)).uid, candidateUid(range, 'berth-warm-1', 1));
  });

  test('the uid a task\'s claims record is kept (their files are its); one outside the range is not', async () => {
    const { api, calls } = namespace([]);
    const uids = new PodUids({ api });
    assert.equal((await take(uids, 'task-c', 'task-c', '1900000007')).uid, 1_900_000_007);
    assert.deepEqual(calls, [], 'a recorded uid needs no check');
    assert.equal((await take(uids, 'task-c', 'task-c', '1000')).uid, candidateUid(uids.range, 'task-c', 0));
  });

  test('two pods being made at once never get one uid; a full range is RESOURCE_EXHAUSTED naming the key', async () => {
    const { api } = namespace([]);
    const uids = new PodUids({ api, configured: '70000-70001' });
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const first = uids.with('same', 'task-1', undefined, async (identity) => (await held, identity.uid));
    await new Promise((resolve) => setImmediate(resolve));
    const second = await take(uids, 'same', 'task-2');
    release();
    assert.notEqual(await first, second.uid);
    const full = namespace([{ [LABEL.uid]: '70000', [LABEL.task]: 'x' }, { [LABEL.uid]: '70001', [LABEL.task]: 'y' }]);
    await assert.rejects(take(new PodUids({ api: full.api, configured: '70000-70001' }), 'z', 'z'), (err: unknown) =>
      err instanceof ResourceExhaustedError && /^no free uid for a new pod in kubernetes\.task_uids \(70000-70001\) after 2 tries/.test(err.message));
  });
});
