/**
 * Kubernetes stand-in (a test double): the API server's error `Status`
 * objects, with the reasons, codes and message wording of the real server
 * (k8s.io/apimachinery/pkg/api/errors), so a client's error handling meets
 * what a cluster sends.
 */

export interface StatusCause {
  readonly reason: string;
  readonly message: string;
  readonly field?: string;
}

export interface StatusDetails {
  readonly name?: string;
  readonly group?: string;
  readonly kind?: string;
  readonly causes?: readonly StatusCause[];
  readonly retryAfterSeconds?: number;
}

/** A failure answered as a `v1.Status` with its HTTP code. */
export class StatusError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: StatusDetails,
  ) {
    super(message);
  }

  toStatus(): Record<string, unknown> {
    return {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: this.message,
      reason: this.reason,
      ...(this.details ? { details: this.details } : {}),
      code: this.code,
    };
  }
}

/** `name` is the plural resource name (`pods`), as the server puts it in messages and `details.kind`. */
export interface ResourceRef {
  readonly group: string;
  readonly name: string;
}

const qualified = (r: ResourceRef) => (r.group ? `${r.name}.${r.group}` : r.name);
const detailsOf = (r: ResourceRef, name: string): StatusDetails => ({ name, ...(r.group ? { group: r.group } : {}), kind: r.name });

export const notFound = (r: ResourceRef, name: string) =>
  new StatusError(404, 'NotFound', `${qualified(r)} "${name}" not found`, detailsOf(r, name));

export const alreadyExists = (r: ResourceRef, name: string) =>
  new StatusError(409, 'AlreadyExists', `${qualified(r)} "${name}" already exists`, detailsOf(r, name));

export const conflict = (r: ResourceRef, name: string, why: string) =>
  new StatusError(
    409,
    'Conflict',
    `Operation cannot be fulfilled on ${qualified(r)} "${name}": ${why}`,
    detailsOf(r, name),
  );

export const badRequest = (message: string) => new StatusError(400, 'BadRequest', message);

export const methodNotAllowed = (method: string) =>
  new StatusError(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`, {
    causes: [{ reason: 'UnexpectedServerResponse', message: method }],
  });

export const unsupportedMediaType = (type: string) =>
  new StatusError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json`, {
    causes: [{ reason: 'UnexpectedServerResponse', message: type }],
  });

/** The 404 of a path no resource is served at (the real server's wording). */
export const pathNotFound = () => new StatusError(404, 'NotFound', 'the server could not find the requested resource', {});

export const unauthorized = () => new StatusError(401, 'Unauthorized', 'Unauthorized');

export const gone = (message: string) => new StatusError(410, 'Expired', message);

/**
 * RBAC's refusal: `pods "x" is forbidden: User "u" cannot create resource "pods" in API group "" in the namespace "ns"`.
 * `subresource` names a subresource (`pods/exec`); `name` is empty for a collection.
 */
export function forbiddenByRbac(
  user: string,
  verb: string,
  r: ResourceRef & { readonly subresource?: string },
  namespace: string | undefined,
  name: string,
): StatusError {
  const full = r.subresource ? `${r.name}/${r.subresource}` : r.name;
  const subject = name ? `${qualified(r)} "${name}"` : qualified(r);
  const scope = namespace ? ` in the namespace "${namespace}"` : ' at the cluster scope';
  return new StatusError(
    403,
    'Forbidden',
    `${subject} is forbidden: User "${user}" cannot ${verb} resource "${full}" in API group "${r.group}"${scope}`,
    detailsOf(r, name),
  );
}

/** An admission refusal (e.g. an unknown RuntimeClass): `pods "x" is forbidden: WHY`. */
export const forbidden = (r: ResourceRef, name: string, why: string) =>
  new StatusError(403, 'Forbidden', `${qualified(r)} "${name}" is forbidden: ${why}`, detailsOf(r, name));

/** One entry of a validation failure, as field.Error renders it. */
export interface FieldError {
  readonly field: string;
  /** `FieldValueInvalid`, `FieldValueRequired`, `FieldValueForbidden`, `FieldValueNotSupported`, ... */
  readonly type: FieldErrorType;
  readonly detail: string;
  /** The offending value, quoted in the message for Invalid and NotSupported. */
  readonly value?: unknown;
}

export type FieldErrorType =
  | 'FieldValueInvalid'
  | 'FieldValueRequired'
  | 'FieldValueForbidden'
  | 'FieldValueNotSupported'
  | 'FieldValueDuplicate'
  | 'FieldValueNotFound';

const TYPE_TEXT: Record<FieldErrorType, string> = {
  FieldValueInvalid: 'Invalid value',
  FieldValueRequired: 'Required value',
  FieldValueForbidden: 'Forbidden',
  FieldValueNotSupported: 'Unsupported value',
  FieldValueDuplicate: 'Duplicate value',
  FieldValueNotFound: 'Not found',
};

function fieldErrorText(e: FieldError): string {
  const value = e.type !== 'FieldValueRequired' && e.type !== 'FieldValueForbidden'
    ? `: ${JSON.stringify(e.value)}`
    : '';
  return `${TYPE_TEXT[e.type]}${value}${e.detail ? `: ${e.detail}` : ''}`;
}

/** 422 Invalid: `Pod "x" is invalid: spec.containers[0].image: Required value` (a list in brackets when several). */
export function invalid(kind: string, group: string, name: string, errors: readonly FieldError[]): StatusError {
  const parts = errors.map((e) => `${e.field}: ${fieldErrorText(e)}`);
  const list = parts.length === 1 ? parts[0]! : `[${parts.join(', ')}]`;
  return new StatusError(422, 'Invalid', `${kind} "${name}" is invalid: ${list}`, {
    name,
    ...(group ? { group } : {}),
    kind,
    causes: errors.map((e) => ({ reason: e.type, message: fieldErrorText(e), field: e.field })),
  });
}
