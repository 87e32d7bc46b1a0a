/**
 * The pure parts of the Kubernetes stand-in (a test double of a Kubernetes
 * API server): selectors, patches, quantities, the scheduler's messages and
 * the decoding against the API schema, checked against what the real API
 * server answers, without Docker.
 */
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { invalid, type FieldError, type StatusError } from '../standins/kubernetes/errors.js';
import { decode, loadSchemas } from '../standins/kubernetes/field-validation.js';
import { goContains, goParseCidr } from '../standins/kubernetes/go-cidr.js';
import { jsonPatch, mergePatch, strategicMerge } from '../standins/kubernetes/patch.js';
import { validatePodSpec } from '../standins/kubernetes/pod-spec.js';
import { parseQuantity } from '../standins/kubernetes/quantity.js';
import { makeNode, unschedulableReason } from '../standins/kubernetes/scheduler.js';
import { labelSelectorMatcher, parseFieldSelector, parseLabelSelector } from '../standins/kubernetes/selectors.js';
import { ObjectStore } from '../standins/kubernetes/store.js';

const WHAT = 'Pod in version "v1" cannot be handled as a Pod';

describe('Kubernetes stand-in: selectors', () => {
  it('label selectors: equality, sets, existence, as kubectl -l writes them', () => {
    const m = parseLabelSelector('tier in (a, b),env!=prod,owner,!legacy');
    assert.equal(m({ tier: 'a', env: 'dev', owner: 'x' }), true);
    assert.equal(m({ tier: 'c', env: 'dev', owner: 'x' }), false);
    assert.equal(m({ tier: 'a', env: 'prod', owner: 'x' }), false);
    assert.equal(m({ tier: 'a', owner: 'x', legacy: '' }), false);
    assert.equal(m({ tier: 'b' }), false);
    assert.equal(parseLabelSelector('a==1')({ a: '1' }), true);
    assert.equal(parseLabelSelector('')({}), true);
  });

  it('a selector that does not parse is a 400 BadRequest', () => {
    assert.throws(() => parseLabelSelector('a=(b'), (e: StatusError) => e.code === 400 && e.reason === 'BadRequest');
    assert.throws(() => parseFieldSelector('spec.image=x', ['metadata.name']), { message: 'field label not supported: spec.image' });
  });

  it('a NetworkPolicy podSelector: matchLabels and matchExpressions; empty selects all', () => {
    const m = labelSelectorMatcher({ matchLabels: { t: '1' }, matchExpressions: [{ key: 'k', operator: 'NotIn', values: ['x'] }] });
    assert.equal(m({ t: '1', k: 'y' }), true);
    assert.equal(m({ t: '1', k: 'x' }), false);
    assert.equal(labelSelectorMatcher({})({ any: 'thing' }), true);
  });
});

describe('Kubernetes stand-in: patches', () => {
  const pod = { metadata: { labels: { a: '1', b: '2' } }, spec: { containers: [{ name: 'c', image: 'i', env: [{ name: 'X', value: '1' }] }] } };

  it('merge patch: null deletes a label, objects merge, lists replace', () => {
    assert.deepEqual(mergePatch(pod, { metadata: { labels: { a: null, c: '3' } } }), { ...pod, metadata: { labels: { b: '2', c: '3' } } });
  });

  it('strategic merge patch merges containers by name and env by name', () => {
    const out = strategicMerge(pod, { spec: { containers: [{ name: 'c', env: [{ name: 'Y', value: '2' }] }] } }) as typeof pod;
    assert.deepEqual(out.spec.containers[0]!.env, [{ name: 'X', value: '1' }, { name: 'Y', value: '2' }]);
    assert.equal(out.spec.containers[0]!.image, 'i');
    const deleted = strategicMerge(pod, { spec: { containers: [{ name: 'c', $patch: 'delete' }] } }) as typeof pod;
    assert.deepEqual(deleted.spec.containers, []);
  });

  it('JSON patch applies in order and fails with the server message on a missing path', () => {
    const out = jsonPatch(pod, [
      { op: 'add', path: '/metadata/labels/x~1y', value: 'z' },
      { op: 'remove', path: '/metadata/labels/a' },
    ]) as typeof pod;
    assert.deepEqual(out.metadata.labels, { b: '2', 'x/y': 'z' });
    assert.throws(() => jsonPatch(pod, [{ op: 'replace', path: '/metadata/annotations/a', value: 'v' }]), /doc is missing path/);
  });
});

describe('Kubernetes stand-in: quantities and scheduling', () => {
  it('parses quantities as the API server does', () => {
    assert.equal(parseQuantity('500m'), 0.5);
    assert.equal(parseQuantity('2Gi'), 2 * 2 ** 30);
    assert.equal(parseQuantity('1e3'), 1000);
    assert.equal(parseQuantity('128M'), 128e6);
    assert.equal(parseQuantity('1.5'), 1.5);
    assert.equal(parseQuantity('12 apples'), undefined);
  });

  it("gives the scheduler's messages for a selector, a taint and a lack of resources", () => {
    const node = makeNode({ cpu: 2, memoryBytes: 2 ** 30, taints: [{ key: 'dedicated', value: 'sandboxes', effect: 'NoSchedule' }] });
    const pod = (spec: Record<string, unknown>) => ({ spec: { containers: [{}], ...spec } }) as Parameters<typeof unschedulableReason>[1];
    const tolerated = [{ key: 'dedicated', operator: 'Exists' }];
    assert.match(unschedulableReason(node, pod({ tolerations: tolerated, nodeSelector: { pool: 'gpu' } }), []) ?? '', /^0\/1 nodes are available: 1 node\(s\) didn't match Pod's node affinity\/selector\. preemption:/);
    assert.match(unschedulableReason(node, pod({}), []) ?? '', /1 node\(s\) had untolerated taint \{dedicated: sandboxes\}\./);
    const wants = (cpu: string, memory: string) => pod({ tolerations: tolerated, containers: [{ resources: { requests: { cpu, memory } } }] });
    assert.equal(unschedulableReason(node, wants('1', '512Mi'), []), undefined);
    assert.equal(
      unschedulableReason(node, wants('1500m', '768Mi'), [wants('1', '512Mi')]),
      '0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.',
    );
  });
});

describe('Kubernetes stand-in: decoding and errors', () => {
  before(() => loadSchemas());

  const body = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' }, spec: { containers: [{ name: 'c', image: 'i', imagePullPolicyy: 'Never' }], nodeSelectr: {} } };

  it('Strict rejects unknown fields with the strict decoding error, naming each', () => {
    assert.throws(() => decode(body, 'V1Pod', 'Strict', WHAT), (e: StatusError) => {
      assert.equal(e.code, 400);
      assert.equal(e.message, `${WHAT}: strict decoding error: unknown field "spec.containers[0].imagePullPolicyy", unknown field "spec.nodeSelectr"`);
      return true;
    });
  });

  it('Warn drops unknown fields and reports them; Ignore drops them silently', () => {
    const warned = decode(body, 'V1Pod', 'Warn', WHAT);
    assert.deepEqual(warned.warnings, ['unknown field "spec.containers[0].imagePullPolicyy"', 'unknown field "spec.nodeSelectr"']);
    assert.deepEqual(warned.value.spec, { containers: [{ name: 'c', image: 'i' }] });
    assert.deepEqual(decode(body, 'V1Pod', 'Ignore', WHAT).warnings, []);
  });

  it('a value of the wrong type is a 400 whatever the validation mode', () => {
    assert.throws(() => decode({ spec: { containers: 'c' } }, 'V1Pod', 'Ignore', WHAT), /cannot unmarshal string into Go struct field PodSpec\.spec\.containers of type \[\]Container/);
  });

  it('Invalid lists several field errors in brackets, as field.ErrorList prints them', () => {
    const e = invalid('Pod', '', 'p', [
      { field: 'metadata.name', type: 'FieldValueInvalid', value: 'P', detail: 'bad' },
      { field: 'spec.containers', type: 'FieldValueRequired', detail: '' },
    ]);
    assert.equal(e.message, 'Pod "p" is invalid: [metadata.name: Invalid value: "P": bad, spec.containers: Required value]');
    assert.deepEqual(e.toStatus().details, {
      name: 'p',
      kind: 'Pod',
      causes: [
        { reason: 'FieldValueInvalid', message: 'Invalid value: "P": bad', field: 'metadata.name' },
        { reason: 'FieldValueRequired', message: 'Required value', field: 'spec.containers' },
      ],
    });
  });

  it('the store: one resourceVersion counter, watches resume after a version, too old is 410 Expired', () => {
    const store = new ObjectStore();
    const a = store.create('pods', { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'a', namespace: 'n' } });
    const b = store.create('persistentvolumeclaims', { apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata: { name: 'b', namespace: 'n' } });
    assert.equal(Number(b.metadata.resourceVersion), Number(a.metadata.resourceVersion) + 1);
    const seen: string[] = [];
    const stop = store.watch(Number(a.metadata.resourceVersion), (e) => seen.push(`${e.type} ${e.object.metadata.name}`));
    store.remove('pods', 'n', 'a');
    stop();
    assert.deepEqual(seen, ['ADDED b', 'DELETED a']);
    for (let i = 0; i < 5000; i++) store.update('persistentvolumeclaims', b);
    assert.throws(() => store.watch(1, () => undefined), (e: StatusError) => e.code === 410 && /^too old resource version: 1 /.test(e.message));
  });
});

describe('Kubernetes stand-in: downwardAPI volumes', () => {
  const podWith = (volume: object, mount: object) => ({
    containers: [{ name: 'c', image: 'i', volumeMounts: [{ name: 'v', mountPath: '/etc/passwd', ...mount }] }],
    volumes: [{ name: 'v', ...volume }],
  });
  const errorsOf = (spec: object) => {
    const errors: FieldError[] = [];
    validatePodSpec(spec, errors);
    return errors.map((e) => `${e.field}: ${e.type}`);
  };
  const annotation = { downwardAPI: { items: [{ path: 'passwd', fieldRef: { fieldPath: "metadata.annotations['berth.dev/passwd']" } }] } };

  it('metadata fields are served, and a subPath naming one of the items mounts it alone', () => {
    assert.deepEqual(errorsOf(podWith(annotation, { subPath: 'passwd', readOnly: true })), []);
    assert.deepEqual(errorsOf(podWith({ downwardAPI: { items: [{ path: 'n', fieldRef: { fieldPath: 'metadata.name' } }] } }, {})), []);
  });

  it('what it cannot serve is refused naming the field, rather than ignored', () => {
    assert.deepEqual(errorsOf(podWith({ downwardAPI: { items: [{ path: 'ip', fieldRef: { fieldPath: 'status.podIP' } }] } }, {})), [
      'spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath: FieldValueNotSupported',
    ]);
    assert.deepEqual(errorsOf(podWith(annotation, { subPath: 'other' })), ['spec.containers[0].volumeMounts[0].subPath: FieldValueForbidden']);
    assert.deepEqual(errorsOf(podWith({ emptyDir: {} }, { subPath: 'passwd' })), ['spec.containers[0].volumeMounts[0].subPath: FieldValueForbidden']);
    assert.deepEqual(errorsOf(podWith({ downwardAPI: { items: [{ path: '../x', fieldRef: { fieldPath: 'metadata.name' } }] } }, {})), [
      'spec.volumes[0].downwardAPI.items[0].path: FieldValueInvalid',
    ]);
  });
});

describe('Kubernetes stand-in: NetworkPolicy ipBlocks as Go reads them', () => {
  const net = (s: string) => goParseCidr(s)!;
  const inside = (outer: string, inner: string) => goContains(net(outer), net(inner).ip);

  it('parses both families, masks host bits, and refuses what Go refuses', () => {
    assert.deepEqual(net('10.1.2.3/8'), { ip: [10, 0, 0, 0], mask: [255, 0, 0, 0], prefix: 8 });
    assert.equal(net('fd00:ec2::254/128').ip.length, 16);
    for (const bad of ['10.0.0.0/33', '10.0.0.0', 'fe80::/129', 'fe80::1%eth0/64', 'example/8', 7]) assert.equal(goParseCidr(bad), undefined, String(bad));
  });

  it('an IPv4-mapped IPv6 range is IPv4: outside ::/0, and an IPv4 range is outside any IPv6 block', () => {
    assert.ok(inside('::/0', 'fc00::/7'));
    assert.ok(inside('0.0.0.0/0', '169.254.0.0/16'));
    assert.ok(!inside('::/0', '::ffff:0:0/96'));
    assert.ok(!inside('::/0', '10.0.0.0/8'));
    assert.ok(!inside('0.0.0.0/0', 'fe80::/10'));
    assert.ok(inside('::ffff:0:0/96', '::ffff:10.0.0.0/104'));
  });
});
