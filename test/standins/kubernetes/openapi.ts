/**
 * Kubernetes stand-in (a test double): the part of `/openapi/v3` kubectl
 * reads before `apply`, `create` and `replace`: one document per group
 * version with the item path of each served resource, its PATCH operation
 * tagged with the kind (`x-kubernetes-group-version-kind`) and the
 * `fieldValidation` query parameter, which is how kubectl learns that the
 * server validates fields itself and so sends `fieldValidation=Strict`
 * instead of validating against a schema it downloads. No schemas are
 * served (`kubectl explain` does not work against the stand-in); kubectl
 * then builds strategic merge patches from its own compiled-in types.
 */
import { createHash } from 'node:crypto';
import type { ResourceInfo } from './resource.js';
import { SERVED_VERSION } from './discovery.js';

const docPath = (info: ResourceInfo) => (info.group ? `apis/${info.group}/${info.version}` : `api/${info.version}`);

function document(group: string, version: string, resources: readonly ResourceInfo[]): Record<string, unknown> {
  const paths: Record<string, unknown> = {};
  const param = (name: string) => ({ name, in: 'query', schema: { type: 'string', uniqueItems: true } });
  for (const r of resources.filter((x) => x.group === group && x.version === version)) {
    const prefix = `/${docPath(r)}${r.namespaced ? '/namespaces/{namespace}' : ''}/${r.name}/{name}`;
    const gvk = { group: r.group, version: r.version, kind: r.kind };
    const operation = (verb: string) => ({
      operationId: `${verb}${r.kind}`,
      'x-kubernetes-action': verb,
      'x-kubernetes-group-version-kind': gvk,
      parameters: verb === 'get' ? [] : [param('dryRun'), param('fieldManager'), param('fieldValidation')],
      responses: { '200': { description: 'OK' } },
    });
    paths[prefix] = {
      get: operation('get'),
      ...(r.verbs.includes('patch') ? { patch: operation('patch') } : {}),
      ...(r.verbs.includes('update') ? { put: operation('put') } : {}),
    };
  }
  return { openapi: '3.0.0', info: { title: 'Kubernetes', version: SERVED_VERSION.gitVersion }, paths, components: { schemas: {} } };
}

/** `/openapi/v3` (the index) or `/openapi/v3/api/v1` etc.; undefined for another path. */
export function openApiV3(path: string, resources: readonly ResourceInfo[]): Record<string, unknown> | undefined {
  const gvs = [...new Map(resources.map((r) => [docPath(r), r])).values()];
  if (path === '/openapi/v3') {
    return {
      paths: Object.fromEntries(
        gvs.map((r) => {
          const hash = createHash('sha512').update(JSON.stringify(document(r.group, r.version, resources))).digest('hex').toUpperCase();
          return [docPath(r), { serverRelativeURL: `/openapi/v3/${docPath(r)}?hash=${hash}` }];
        }),
      ),
    };
  }
  const r = gvs.find((x) => path === `/openapi/v3/${docPath(x)}`);
  return r ? document(r.group, r.version, resources) : undefined;
}
