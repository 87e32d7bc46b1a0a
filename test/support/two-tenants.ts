/**
 * A real `berth serve` with two tenants, `alpha` (A, the victim) and `beta`
 * (B, the one trying to reach A), each with its own random API key, and a
 * gRPC client per tenant on one channel. The isolation suite starts one per
 * file and backend.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClientError, createClient, Metadata, type Status } from 'nice-grpc';
import { AsyncQueue } from '../../services/common/async-queue.js';
import { hashApiKey } from '../../services/common/config.js';
import {
  DispatcherDefinition,
  type DispatcherClient,
  type SessionClientMessage,
} from '../../services/gen/berth/v1/dispatcher.js';
import { startServe, type ServeProcess } from './serve-process.js';

export const TENANT_A = 'alpha';
export const TENANT_B = 'beta';

export interface TwoTenants extends AsyncDisposable {
  readonly serve: ServeProcess;
  readonly keys: { readonly [TENANT_A]: string; readonly [TENANT_B]: string };
  readonly a: DispatcherClient;
  readonly b: DispatcherClient;
  /** The config file the server was started with. */
  readonly configFile: string;
  /** A client sending `authorization: Bearer KEY` (or no authorization when key is undefined). */
  clientWith(key: string | undefined): DispatcherClient;
  /** CallTool of a tenant's client; resolves to the result JSON text. */
  call(client: DispatcherClient, tool: string, args: object, taskId: string, sessionId?: string): Promise<string>;
  stop(): Promise<void>;
}

export interface TwoTenantsOptions {
  readonly backend: 'local' | 'docker' | 'kubernetes';
  /** Extra top-level config lines (YAML), e.g. `approvals: { skip_in_containers: false }`. */
  readonly configLines?: readonly string[];
  /** Extra keys of a tenant's entry (YAML flow-map text), e.g. `{ alpha: 'toolsets: [file]' }`. */
  readonly tenantFields?: Partial<Record<typeof TENANT_A | typeof TENANT_B, string>>;
  /** Tenants to leave out of the config (a revoked key). */
  readonly omit?: readonly string[];
  /** Keys to reuse (a restart with the same keys). */
  readonly keys?: { readonly [TENANT_A]: string; readonly [TENANT_B]: string };
  readonly env?: NodeJS.ProcessEnv;
}

export function bearer(key: string): Metadata {
  return Metadata({ authorization: `Bearer ${key}` });
}

export async function startTwoTenants(options: TwoTenantsOptions): Promise<TwoTenants> {
  const dir = mkdtempSync(join(tmpdir(), 'berth-isolation-'));
  const keys = options.keys ?? {
    [TENANT_A]: `key-a-${randomBytes(16).toString('hex')}`,
    [TENANT_B]: `key-b-${randomBytes(16).toString('hex')}`,
  };
  const configFile = join(dir, 'config.yaml');
  const tenants = [TENANT_A, TENANT_B].filter((t) => !options.omit?.includes(t));
  writeFileSync(
    configFile,
    [
      ...(options.backend === 'local' ? ['allow_local_multi_tenant: true'] : []),
      ...(options.configLines ?? []),
      'tenants:',
      ...tenants.map((t) => {
        const extra = options.tenantFields?.[t as keyof typeof keys];
        return `  - { id: ${t}, api_key_sha256: ${hashApiKey(keys[t as keyof typeof keys])}${extra ? `, ${extra}` : ''} }`;
      }),
      '',
    ].join('\n'),
  );
  let serve: ServeProcess;
  try {
    serve = await startServe(['--config', configFile, '--backend', options.backend], {
      env: { TERMINAL_CONTAINER_PERSISTENT: 'false', ...options.env },
    });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const clientWith = (key: string | undefined) =>
    createClient(DispatcherDefinition, serve.channel, key === undefined ? {} : { '*': { metadata: bearer(key) } });
  const stop = async () => {
    await serve.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  return {
    serve,
    keys,
    a: clientWith(keys[TENANT_A]),
    b: clientWith(keys[TENANT_B]),
    configFile,
    clientWith,
    async call(client, tool, args, taskId, sessionId = '') {
      const r = await client.callTool({ name: tool, argumentsJson: JSON.stringify(args), taskId, sessionId });
      return r.resultJson;
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/** The gRPC answer of a call, success or failure, as comparable text. */
export async function answerOf(call: () => Promise<unknown>): Promise<string> {
  try {
    return `ok ${JSON.stringify(await call())}`;
  } catch (err) {
    if (err instanceof ClientError) return `error ${err.code as Status} ${err.details}`;
    throw err;
  }
}

/**
 * A foreground `terminal` call on a Session stream: resolves `started` when
 * the command's first output arrives, `result` with the result JSON.
 */
export function streamingTerminal(
  client: DispatcherClient,
  taskId: string,
  command: string,
): { readonly started: Promise<void>; readonly result: Promise<string> } {
  const outgoing = new AsyncQueue<SessionClientMessage>();
  outgoing.push({
    message: {
      $case: 'call',
      value: { callId: 'c1', request: { name: 'terminal', argumentsJson: JSON.stringify({ command }), taskId, sessionId: '' } },
    },
  });
  let onStarted: () => void = () => undefined;
  const started = new Promise<void>((resolve) => (onStarted = resolve));
  const result = (async () => {
    try {
      for await (const m of client.session(outgoing)) {
        if (m.message?.$case === 'output') onStarted();
        if (m.message?.$case === 'result') return m.message.value.resultJson;
      }
      throw new Error('the session ended without a result');
    } finally {
      outgoing.close();
    }
  })();
  return { started: Promise.race([started, result.then(() => undefined)]), result };
}
