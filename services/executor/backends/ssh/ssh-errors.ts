/**
 * Typed errors for ssh connection failures. The preflight of a task says
 * exactly what failed (name lookup, refused, timeout, authentication, host
 * key), because each needs a different fix by the operator.
 */
import { BerthError, fromSocketError } from '../../../common/errors.js';
import type { ErrorCode } from '../../../common/errors.js';

export type SshFailureReason =
  | 'dns'
  | 'refused'
  | 'unreachable'
  | 'timeout'
  | 'reset'
  | 'auth'
  | 'private-key'
  | 'host-key-changed'
  | 'host-key-unknown'
  | 'host-key-revoked'
  | 'closed'
  | 'protocol';

export interface SshEndpoint {
  readonly host: string;
  readonly port: number;
  readonly user: string;
}

/** A connection to the ssh host could not be made; `reason` says which step failed. */
export class SshConnectError extends BerthError {
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly reason: SshFailureReason;

  constructor(code: ErrorCode, reason: SshFailureReason, endpoint: SshEndpoint, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.host = endpoint.host;
    this.port = endpoint.port;
    this.user = endpoint.user;
    this.reason = reason;
  }
}

/** What the host verifier decided, carried to the error handler (ssh2 only reports "verification failed"). */
export type HostKeyRejection =
  | { readonly kind: 'changed'; readonly presented: string; readonly pinned: readonly string[]; readonly file: string; readonly lines: readonly number[] }
  | { readonly kind: 'unknown'; readonly presented: string; readonly file: string }
  | { readonly kind: 'revoked'; readonly presented: string; readonly file: string; readonly line: number };

function where(e: SshEndpoint): string {
  return `${e.host}:${e.port}`;
}

/** The error for a rejected host key. */
export function hostKeyError(endpoint: SshEndpoint, rejection: HostKeyRejection): SshConnectError {
  switch (rejection.kind) {
    case 'changed':
      return new SshConnectError(
        'FAILED_PRECONDITION',
        'host-key-changed',
        endpoint,
        `ssh host key of ${where(endpoint)} has CHANGED: the host presents ${rejection.presented}, but ` +
          `${rejection.file} (line ${rejection.lines.join(', ')}) pins ${rejection.pinned.join(', ')}. ` +
          'Someone may be intercepting the connection. If the host was reinstalled, remove the old line and reconnect.',
      );
    case 'unknown':
      return new SshConnectError(
        'FAILED_PRECONDITION',
        'host-key-unknown',
        endpoint,
        `ssh host key of ${where(endpoint)} (${rejection.presented}) is not in ${rejection.file}, and ` +
          'terminal.ssh_host_key_policy is strict. Add the key to that file, or use the accept-new policy.',
      );
    case 'revoked':
      return new SshConnectError(
        'FAILED_PRECONDITION',
        'host-key-revoked',
        endpoint,
        `ssh host key of ${where(endpoint)} (${rejection.presented}) is marked @revoked in ${rejection.file} (line ${rejection.line}).`,
      );
  }
}

function errorLevel(err: unknown): string | undefined {
  const level = (err as { level?: unknown } | null)?.level;
  return typeof level === 'string' ? level : undefined;
}

function errnoOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/**
 * Maps what ssh2 reported while connecting to a typed error. `rejection` is
 * set when our host verifier refused the key; `timeoutMs` names the limit.
 */
export function connectError(
  err: unknown,
  endpoint: SshEndpoint,
  options: { readonly rejection?: HostKeyRejection; readonly timeoutMs: number; readonly keyName: string },
): SshConnectError {
  if (options.rejection) return hostKeyError(endpoint, options.rejection);
  const detail = err instanceof Error ? err.message : String(err);
  const errno = errnoOf(err);
  const socket = fromSocketError(err, `ssh host ${where(endpoint)}`);
  if (socket) {
    switch (errno) {
      case 'ENOTFOUND':
      case 'EAI_AGAIN':
        return new SshConnectError(
          socket.code,
          'dns',
          endpoint,
          `cannot resolve ssh host "${endpoint.host}": DNS lookup failed (${errno}). Check terminal.ssh_host.`,
          { cause: err },
        );
      case 'ECONNREFUSED':
        return new SshConnectError(
          socket.code,
          'refused',
          endpoint,
          `ssh connection to ${where(endpoint)} was refused: nothing listens there. Is sshd running, and is terminal.ssh_port right?`,
          { cause: err },
        );
      case 'ETIMEDOUT':
        return new SshConnectError(socket.code, 'timeout', endpoint, `ssh connection to ${where(endpoint)} timed out (${errno}).`, {
          cause: err,
        });
      case 'ECONNRESET':
      case 'EPIPE':
        return new SshConnectError(socket.code, 'reset', endpoint, `ssh connection to ${where(endpoint)} was reset by the host (${errno}).`, {
          cause: err,
        });
      default:
        return new SshConnectError(socket.code, 'unreachable', endpoint, `ssh host ${where(endpoint)} is unreachable: ${detail}`, {
          cause: err,
        });
    }
  }
  switch (errorLevel(err)) {
    case 'client-timeout':
      return new SshConnectError(
        'UNAVAILABLE',
        'timeout',
        endpoint,
        `ssh connection to ${where(endpoint)} timed out: no completed handshake within ${Math.round(options.timeoutMs / 1000)}s ` +
          '(terminal.ssh_connect_timeout). The host may be down, or a firewall drops the packets.',
        { cause: err },
      );
    case 'client-authentication':
      return new SshConnectError(
        'FAILED_PRECONDITION',
        'auth',
        endpoint,
        `ssh authentication as ${endpoint.user}@${where(endpoint)} failed: the host did not accept the key ${options.keyName}. ` +
          `Is its public key in ~${endpoint.user}/.ssh/authorized_keys on the host?`,
        { cause: err },
      );
    default:
      break;
  }
  if (/privateKey|private key/i.test(detail)) {
    return new SshConnectError('FAILED_PRECONDITION', 'private-key', endpoint, `cannot use the ssh key ${options.keyName}: ${detail}`, {
      cause: err,
    });
  }
  return new SshConnectError('UNAVAILABLE', 'protocol', endpoint, `ssh connection to ${where(endpoint)} failed: ${detail}`, {
    cause: err,
  });
}
