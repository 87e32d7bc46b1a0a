/**
 * The Kubernetes API server's refusals (and its absence) as domain errors
 * that say what was being done, to which object, and what to do.
 */
import { BerthError, FailedPreconditionError, NotFoundError, ResourceExhaustedError, UnavailableError } from '../../../common/errors.js';

/** The call that failed: `create` `pods` `berth-x` in namespace `ns`. */
export interface KubeCall {
  readonly verb: string;
  readonly resource: string;
  readonly name?: string;
  readonly namespace: string;
  /** The API server's URL, for "cannot reach". */
  readonly server?: string;
}

/** The API server's Status of a failed call, when it sent one. */
export interface KubeStatus {
  readonly code?: number;
  readonly reason?: string;
  readonly message?: string;
}

/** The Status carried by a client-node ApiException (or undefined: the call never got an answer). */
export function statusOf(err: unknown): KubeStatus | undefined {
  const e = err as { code?: unknown; body?: unknown } | null;
  if (!e || typeof e.code !== 'number') return undefined;
  let body = e.body;
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body);
    } catch {
      body = { message: body };
    }
  }
  const b = (body && typeof body === 'object' ? body : {}) as { reason?: unknown; message?: unknown };
  return {
    code: e.code,
    ...(typeof b.reason === 'string' ? { reason: b.reason } : {}),
    ...(typeof b.message === 'string' ? { message: b.message } : {}),
  };
}

export function isNotFound(err: unknown): boolean {
  return statusOf(err)?.code === 404;
}

export function isConflict(err: unknown): boolean {
  const s = statusOf(err);
  // 422: a JSON patch whose `test` of the resourceVersion failed (someone else changed the object first).
  return s?.code === 409 || s?.code === 422;
}

/** Codes of failures to reach the server at all. */
const UNREACHABLE = /ECONNREFUSED|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ECONNRESET|ENETUNREACH|socket hang up|certificate|self[- ]signed|fetch failed/i;

function what(call: KubeCall): string {
  return `${call.verb} ${call.resource}${call.name ? ` "${call.name}"` : ''} in namespace ${call.namespace}`;
}

/** `err` of `call` as a Berth error; BerthErrors pass through. */
export function kubeError(err: unknown, call: KubeCall): Error {
  if (err instanceof BerthError) return err;
  const status = statusOf(err);
  const server = call.server ? ` at ${call.server}` : '';
  if (!status) {
    const detail = err instanceof Error ? `${err.message}${(err as { code?: unknown }).code ? ` (${String((err as { code?: unknown }).code)})` : ''}` : String(err);
    if (UNREACHABLE.test(detail) || (err as { name?: string } | null)?.name === 'FetchError') {
      return new UnavailableError(
        `cannot reach the Kubernetes API server${server} to ${what(call)}: ${detail}; check that the cluster is up and the ` +
          'kubeconfig (KUBECONFIG, its current context, or kubernetes.context) names it, or that the executor runs in the cluster',
        { cause: err },
      );
    }
    return new UnavailableError(`the Kubernetes API call to ${what(call)} failed: ${detail}`, { cause: err });
  }
  const message = status.message ?? `HTTP ${status.code}`;
  if (status.code === 403 && /exceeded quota|forbidden: exceeded/i.test(message)) {
    return new ResourceExhaustedError(
      `the namespace's ResourceQuota refused to ${what(call)} (${message}); end idle tasks or raise the quota`,
      { cause: err },
    );
  }
  if (status.code === 403) {
    return new FailedPreconditionError(
      `the Kubernetes API server refused to ${what(call)} (Forbidden: ${message}); give the executor's ServiceAccount ` +
        `(or kubeconfig user) the verb "${call.verb}" on "${call.resource}" in namespace ${call.namespace} ` +
        '(the Role of deploy/kubernetes/overlays/kubernetes-backend holds exactly the ones Berth uses)',
      { cause: err },
    );
  }
  if (status.code === 401) {
    return new FailedPreconditionError(
      `the Kubernetes API server did not accept the executor's credentials to ${what(call)} (${message}); check the kubeconfig's user or the ServiceAccount token`,
      { cause: err },
    );
  }
  if (status.code === 404 && /namespaces? "/.test(message)) {
    return new FailedPreconditionError(`${message}: create namespace ${call.namespace} or set kubernetes.namespace to an existing one`, { cause: err });
  }
  if (status.code === 404) return new NotFoundError(`${message} (${what(call)})`, { cause: err });
  if (status.code === 422 || status.code === 400) {
    return new FailedPreconditionError(`the Kubernetes API server rejected the request to ${what(call)}: ${message}; check the kubernetes.* settings`, { cause: err });
  }
  if ((status.code ?? 0) >= 500 || status.code === 429) {
    return new UnavailableError(`the Kubernetes API server failed to ${what(call)} (${status.code} ${status.reason ?? ''}: ${message}); try again`, { cause: err });
  }
  return new UnavailableError(`the Kubernetes API server refused to ${what(call)} (${status.code} ${status.reason ?? ''}: ${message})`, { cause: err });
}
