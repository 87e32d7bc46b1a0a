/**
 * The CLI's gRPC client over node:http2 (what `berth call` and `berth tools`
 * use) against a real grpc-js server (nice-grpc) on an ephemeral port:
 * ListTools and the bidi Session stream with an approval answered on it,
 * the authorization metadata, a status with its message, a closed port,
 * and TLS (a CA, a client certificate, an untrusted server, each side
 * speaking the other's transport) with the CLI's explanations.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ServerCredentials } from '@grpc/grpc-js';
import { ServerError, Status, createServer, type CallContext, type Server } from 'nice-grpc';
import { AsyncQueue } from '../../services/common/async-queue.js';
import { ClientError } from '../../services/common/nice-grpc-common-cjs.js';
import { ReloadableServerCredentials } from '../../services/common/tls.js';
import {
  DispatcherDefinition,
  type DeepPartial,
  type DispatcherServiceImplementation,
  type ListToolsRequest,
  type SessionClientMessage,
  type SessionServerMessage,
} from '../../services/gen/berth/v1/dispatcher.js';
import { explainClientError } from '../../services/cli/client-failure.js';
import type { ClientTarget } from '../../services/cli/client-options.js';
import { openHttp2Client } from '../../services/cli/http2-client.js';
import { SessionConnection } from '../../services/cli/session-connection.js';
import { Metadata } from '../../services/common/nice-grpc-common-cjs.js';
import { freePort } from '../support/free-port.js';
import { createTestPki, type TestPki } from '../support/test-pki.js';

/** A message grpc-message must percent-encode: quotes, a percent sign, a non-ASCII letter, a newline. */
const AWKWARD = 'bad key "k-1": 100% wrong, für\nsure';

const BIG_OUTPUT = 12 * 1024 * 1024;

/** The methods the CLI client uses; the rest answer UNIMPLEMENTED. */
const dispatcher = {
  ...Object.fromEntries(
    Object.keys(DispatcherDefinition.methods).map((name) => [name, () => Promise.reject(new ServerError(Status.UNIMPLEMENTED, 'not in this test'))]),
  ),
  async listTools(request: ListToolsRequest, context: CallContext) {
    const auth = context.metadata.get('authorization');
    if (auth !== 'Bearer good') throw new ServerError(Status.UNAUTHENTICATED, AWKWARD);
    return { toolsJson: JSON.stringify([{ enabled: request.enabledToolsets }]), unknownToolsets: ['nope'], availabilityJson: '' };
  },
  async *session(requests: AsyncIterable<SessionClientMessage>, context: CallContext): AsyncIterable<DeepPartial<SessionServerMessage>> {
    const auth = context.metadata.get('authorization');
    for await (const { message } of requests) {
      if (message?.$case === 'call') {
        const callId = message.value.callId;
        const name = message.value.request?.name ?? '';
        if (name === 'refused') throw new ServerError(Status.PERMISSION_DENIED, AWKWARD);
        // 'big': one message of 12 MiB (the CLI's limit is larger), arriving in many HTTP/2 DATA frames.
        yield { message: { $case: 'output', value: { callId, text: (name === 'big' ? 'y' : 'x').repeat(name === 'big' ? BIG_OUTPUT : 70_000) } } };
        yield {
          message: {
            $case: 'approvalRequest',
            value: { approvalId: `a-${callId}`, callId, command: 'rm -rf /tmp/x', description: 'recursive delete', patternKey: 'rm', choices: ['once', 'deny'], timeoutSeconds: 60 },
          },
        };
      } else if (message?.$case === 'approvalAnswer') {
        const callId = message.value.approvalId.slice(2);
        yield { message: { $case: 'result', value: { callId, resultJson: JSON.stringify({ choice: message.value.choice, auth }), errorStatus: '' } } };
      }
    }
  },
} as unknown as DispatcherServiceImplementation;

function metadata(key: string): Metadata {
  return new Metadata().set('authorization', `Bearer ${key}`);
}

async function startServer(credentials?: ReloadableServerCredentials): Promise<{ server: Server; address: string }> {
  const server = createServer();
  server.add(DispatcherDefinition, dispatcher);
  const port = await server.listen('127.0.0.1:0', credentials ?? ServerCredentials.createInsecure());
  return { server, address: `127.0.0.1:${port}` };
}

/** Runs `use` on a client to `target`, closing it after. */
async function withClient<T>(target: ClientTarget, use: (client: ReturnType<typeof openHttp2Client>['client']) => Promise<T>): Promise<T> {
  const { channel, client } = openHttp2Client(target);
  try {
    return await use(client);
  } finally {
    channel.close();
  }
}

/** One tool call on the Session stream, its approval answered `once`; the result parsed. */
async function sessionCall(target: ClientTarget, name: string, key = 'good'): Promise<{ result: unknown; output: number; approvals: string[] }> {
  return withClient(target, async (client) => {
    let output = 0;
    const approvals: string[] = [];
    const session = new SessionConnection(
      client,
      {
        onApproval: async (request) => {
          approvals.push(request.command);
          return 'once';
        },
        onOutput: (_callId, text) => (output += text.length),
      },
      { metadata: metadata(key) },
    );
    try {
      const resultJson = await session.call({ name, argumentsJson: '{}', taskId: 't', sessionId: 's' });
      return { result: JSON.parse(resultJson) as unknown, output, approvals };
    } finally {
      await session.close();
    }
  });
}

async function failureOf(run: () => Promise<unknown>): Promise<{ code: number; details: string; error: unknown }> {
  try {
    await run();
  } catch (error) {
    const { code, details } = error as { code: number; details: string };
    return { code, details, error };
  }
  assert.fail('the call succeeded');
}

describe('the CLI client over node:http2, plaintext', () => {
  let server: Server;
  let target: ClientTarget;

  before(async () => {
    const started = await startServer();
    server = started.server;
    target = { address: started.address, tls: undefined };
  });

  after(() => server?.forceShutdown());

  test('ListTools: the request and the bearer metadata arrive, the response decodes', async () => {
    const r = await withClient(target, (client) =>
      client.listTools({ enabledToolsets: ['terminal'], disabledToolsets: [], explain: false }, { metadata: metadata('good') }),
    );
    assert.deepEqual(JSON.parse(r.toolsJson), [{ enabled: ['terminal'] }]);
    assert.deepEqual(r.unknownToolsets, ['nope']);
  });

  test('Session: live output, an approval answered on the stream, then the result', async () => {
    const { result, output, approvals } = await sessionCall(target, 'terminal');
    assert.deepEqual(result, { choice: 'once', auth: 'Bearer good' });
    assert.equal(output, 70_000);
    assert.deepEqual(approvals, ['rm -rf /tmp/x']);
  });

  test('a message of many megabytes arrives whole, then the rest of the stream', async () => {
    const { result, output } = await sessionCall(target, 'big');
    assert.equal(output, BIG_OUTPUT);
    assert.deepEqual(result, { choice: 'once', auth: 'Bearer good' });
  });

  test('a status the server sends comes with its message whole (percent-decoded), unary and streaming', async () => {
    const unary = await failureOf(() => withClient(target, (client) => client.listTools({}, { metadata: metadata('bad') })));
    assert.ok(unary.error instanceof ClientError);
    assert.equal(unary.code, Status.UNAUTHENTICATED);
    assert.equal(unary.details, AWKWARD);
    const stream = await failureOf(() => sessionCall(target, 'refused'));
    assert.equal(stream.code, Status.PERMISSION_DENIED);
    assert.equal(stream.details, AWKWARD);
  });

  test('an abort (Ctrl-C) ends the stream: the iteration rejects with an AbortError', async () => {
    const abort = new AbortController();
    const requests = new AsyncQueue<DeepPartial<SessionClientMessage>>();
    requests.push({ message: { $case: 'call', value: { callId: '1', request: { name: 'terminal', argumentsJson: '{}' } } } });
    const seen: string[] = [];
    await assert.rejects(
      withClient(target, async (client) => {
        for await (const { message } of client.session(requests, { metadata: metadata('good'), signal: abort.signal })) {
          seen.push(message?.$case ?? '');
          if (message?.$case === 'approvalRequest') abort.abort();
        }
      }),
      { name: 'AbortError' },
    );
    assert.deepEqual(seen, ['output', 'approvalRequest']);
  });

  test('an unknown method is UNIMPLEMENTED', async () => {
    const bare = createServer();
    const port = await bare.listen('127.0.0.1:0', ServerCredentials.createInsecure());
    try {
      const r = await failureOf(() => withClient({ address: `127.0.0.1:${port}`, tls: undefined }, (client) => client.listTools({})));
      assert.equal(r.code, Status.UNIMPLEMENTED);
    } finally {
      bare.forceShutdown();
    }
  });

  test('a closed port is UNAVAILABLE, and the CLI says nothing listens there', async () => {
    const closed: ClientTarget = { address: `127.0.0.1:${await freePort()}`, tls: undefined };
    const r = await failureOf(() => sessionCall(closed, 'terminal'));
    assert.equal(r.code, Status.UNAVAILABLE);
    assert.match(r.details, /ECONNREFUSED/);
    assert.match((await explainClientError(r.error, closed)) ?? '', /^cannot reach the Berth server at 127\.0\.0\.1:\d+ .*is 'berth serve' running\?/);
  });
});

describe('the CLI client over node:http2, TLS', () => {
  let pki: TestPki;
  let tlsServer: Server;
  let mtlsServer: Server;
  let plainServer: Server;
  let tlsAddress: string;
  let mtlsAddress: string;
  let plainAddress: string;

  before(async () => {
    pki = createTestPki();
    const cert = pki.serverCert('server');
    ({ server: tlsServer, address: tlsAddress } = await startServer(new ReloadableServerCredentials(cert)));
    ({ server: mtlsServer, address: mtlsAddress } = await startServer(new ReloadableServerCredentials({ ...cert, clientCaFile: pki.ca.certFile })));
    ({ server: plainServer, address: plainAddress } = await startServer());
  });

  after(() => {
    tlsServer?.forceShutdown();
    mtlsServer?.forceShutdown();
    plainServer?.forceShutdown();
    pki?.[Symbol.dispose]();
  });

  test('a server whose certificate the given CA signed: the call completes', async () => {
    const { result } = await sessionCall({ address: tlsAddress, tls: { caFile: pki.ca.certFile } }, 'terminal');
    assert.deepEqual(result, { choice: 'once', auth: 'Bearer good' });
  });

  test('a server that requires a client certificate: completes with one, and the CLI names the flags without', async () => {
    const client = pki.clientCert('client');
    const withCert: ClientTarget = { address: mtlsAddress, tls: { caFile: pki.ca.certFile, certFile: client.certFile, keyFile: client.keyFile } };
    const { result } = await sessionCall(withCert, 'terminal');
    assert.deepEqual(result, { choice: 'once', auth: 'Bearer good' });
    const without: ClientTarget = { address: mtlsAddress, tls: { caFile: pki.ca.certFile } };
    const r = await failureOf(() => sessionCall(without, 'terminal'));
    assert.equal(r.code, Status.UNAVAILABLE);
    assert.match((await explainClientError(r.error, without)) ?? '', /requires a client certificate: pass --tls-cert FILE --tls-key FILE/);
  });

  test('a server signed by a CA the client does not trust is UNAVAILABLE, and the CLI says which CA to pass', async () => {
    const target: ClientTarget = { address: tlsAddress, tls: { caFile: pki.untrustedCa.certFile } };
    const r = await failureOf(() => sessionCall(target, 'terminal'));
    assert.equal(r.code, Status.UNAVAILABLE);
    assert.match((await explainClientError(r.error, target)) ?? '', /presented a certificate not signed by .*untrusted/);
  });

  test('plaintext at a TLS server, and TLS at a plaintext server: each explained in terms of the flags', async () => {
    const plainAtTls: ClientTarget = { address: tlsAddress, tls: undefined };
    const a = await failureOf(() => sessionCall(plainAtTls, 'terminal'));
    assert.equal(a.code, Status.UNAVAILABLE);
    assert.match((await explainClientError(a.error, plainAtTls)) ?? '', /speaks TLS: pass --tls-ca FILE/);
    const tlsAtPlain: ClientTarget = { address: plainAddress, tls: { caFile: pki.ca.certFile } };
    const b = await failureOf(() => sessionCall(tlsAtPlain, 'terminal'));
    assert.equal(b.code, Status.UNAVAILABLE);
    assert.match((await explainClientError(b.error, tlsAtPlain)) ?? '', /does not speak TLS: drop --tls-ca/);
  });
});
