/**
 * Kubernetes stand-in (a test double): who a bearer token is, and a
 * simulation of RBAC refusals. Each user is either allowed everything or
 * denied a list of `verb` on `resource[/subresource]` pairs; a denied
 * request gets RBAC's 403 with its wording, so a client's Forbidden
 * handling can be tested without a cluster.
 */
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { forbiddenByRbac, unauthorized, type StatusError } from './errors.js';

export interface User {
  readonly name: string;
  readonly token: string;
  /** `create:pods/exec`, `delete:persistentvolumeclaims`, or `*:pods`. */
  readonly deny: readonly string[];
}

export interface Access {
  readonly verb: string;
  readonly group: string;
  readonly resource: string;
  readonly subresource?: string;
  readonly namespace?: string;
  readonly name: string;
}

const same = (a: string, b: string) => a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));

export class Authorizer {
  readonly #users: readonly User[];

  constructor(users: readonly User[]) {
    this.#users = users;
  }

  /** The user a request's bearer token names; 401 when none does. */
  authenticate(req: IncomingMessage): User {
    const m = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '');
    const user = m ? this.#users.find((u) => same(u.token, m[1]!)) : undefined;
    if (!user) throw unauthorized();
    return user;
  }

  /** RBAC's 403, or undefined when the user may. */
  check(user: User, a: Access): StatusError | undefined {
    const full = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
    const denied = user.deny.some((rule) => {
      const [verb, resource] = rule.split(':');
      return (verb === '*' || verb === a.verb) && (resource === '*' || resource === full);
    });
    if (!denied) return undefined;
    return forbiddenByRbac(user.name, a.verb, { group: a.group, name: a.resource, ...(a.subresource ? { subresource: a.subresource } : {}) }, a.namespace, a.name);
  }
}
