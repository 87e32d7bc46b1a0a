/**
 * TLS where the network is crossed, through real processes and real gRPC
 * channels: `berth serve` with server.tls (mTLS), the CLI's --tls-* flags and
 * BERTH_TLS_* variables, plaintext and TLS clients at the wrong kind of
 * server, certificates reloaded on SIGHUP under a live Session stream, and
 * `berth dispatcher` ↔ `berth executor` over mTLS. Certificates are made for
 * the run by test/support/test-pki.ts.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { ClientError, Status, createChannel, createClient, type Channel } from 'nice-grpc';
import { DispatcherDefinition, type DispatcherClient } from '../../services/gen/berth/v1/dispatcher.js';
import { clientTls, type ClientTlsFiles } from '../../services/common/tls.js';
import { SessionConnection } from '../../services/cli/session-connection.js';
import { startListeningChild, type ListeningChild } from '../../services/cli/bench/listening-child.js';
import { BERTH_BIN, REPO_ROOT } from '../support/serve-process.js';
import { createTestPki, type CertFiles, type TestPki } from '../support/test-pki.js';

interface CliResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `bin/berth ARGS` as a user would, with `input` on its stdin. */
function runCli(args: string[], env: NodeJS.ProcessEnv = {}, input = ''): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BERTH_BIN, ...args], {
      cwd: REPO_ROOT,
      env: { ...withoutTlsEnv(process.env), ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}

function withoutTlsEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const { BERTH_TLS_CA: _ca, BERTH_TLS_CERT: _cert, BERTH_TLS_KEY: _key, BERTH_SERVER: _server, ...rest } = env;
  return rest;
}

function startBerth(args: string[], env: NodeJS.ProcessEnv = {}): Promise<ListeningChild> {
  return startListeningChild({
    name: `berth ${args[0]}`,
    args: [BERTH_BIN, ...args, '--port', '0'],
    cwd: REPO_ROOT,
    env: { ...withoutTlsEnv(process.env), BERTH_LOG_LEVEL: 'info', ...env },
    startTimeoutMs: 30_000,
    stderrKeepBytes: Infinity,
  });
}

function dispatcherClient(address: string, tls: ClientTlsFiles | undefined): { channel: Channel; client: DispatcherClient } {
  const { credentials, options } = tls === undefined ? { credentials: undefined, options: {} } : clientTls(tls);
  const channel = createChannel(address, credentials, options);
  return { channel, client: createClient(DispatcherDefinition, channel) };
}

async function terminal(client: DispatcherClient, command: string, taskId = 't1'): Promise<{ output?: string; error?: string | null }> {
  const r = await client.callTool({ name: 'terminal', argumentsJson: JSON.stringify({ command }), taskId, sessionId: '' });
  return JSON.parse(r.resultJson) as { output?: string; error?: string | null };
}

async function rejection(promise: Promise<unknown>): Promise<ClientError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof ClientError) return err;
    throw err;
  }
  assert.fail('the call succeeded; it should have been refused');
}

/** Serial of the certificate a new TLS connection to `address` is given (presenting `client`, if any). */
function peerSerial(address: string, caFile: string, client?: CertFiles): Promise<string> {
  const [host, port] = address.split(':') as [string, string];
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({
      host,
      port: Number(port),
      ca: readFileSync(caFile),
      ALPNProtocols: ['h2'],
      ...(client ? { cert: readFileSync(client.certFile), key: readFileSync(client.keyFile) } : {}),
    });
    socket.once('secureConnect', () => {
      resolve(socket.getPeerCertificate().serialNumber.toUpperCase());
      socket.destroy();
    });
    socket.once('error', reject);
  });
}

/** Waits for a log line matching `pattern` after the first `from` characters of the log. */
async function logLine(child: ListeningChild, pattern: RegExp, from: number): Promise<string> {
  for (let i = 0; i < 200; i++) {
    const line = child.stderr().slice(from).split('\n').find((l) => pattern.test(l));
    if (line !== undefined) return line;
    await sleep(50);
  }
  assert.fail(`no log line matching ${pattern} from ${child.name}; log:\n${child.stderr().slice(from)}`);
}

describe('berth serve with server.tls and a client CA (mTLS)', () => {
  let pki: TestPki;
  let serve: ListeningChild;
  let live: CertFiles;
  let client: CertFiles;
  let trusted: ClientTlsFiles;
  const channels: Channel[] = [];

  before(async () => {
    pki = createTestPki();
    const first = pki.serverCert('server-1');
    client = pki.clientCert('client');
    // The server reads these paths; the SIGHUP test writes new files over them.
    const dir = join(pki.dir, 'live');
    mkdirSync(dir);
    live = { certFile: join(dir, 'server.crt'), keyFile: join(dir, 'server.key'), serial: first.serial };
    copyFileSync(first.certFile, live.certFile);
    copyFileSync(first.keyFile, live.keyFile);
    const config = join(pki.dir, 'serve.yaml');
    writeFileSync(
      config,
      `server:\n  tls: { cert_file: ${live.certFile}, key_file: ${live.keyFile}, client_ca_file: ${pki.ca.certFile} }\n`,
    );
    serve = await startBerth(['serve', '--config', config], { BERTH_STATE_ROOT: join(pki.dir, 'state') });
    trusted = { caFile: pki.ca.certFile, certFile: client.certFile, keyFile: client.keyFile };
  });

  after(async () => {
    for (const c of channels) c.close();
    await serve?.stop();
    pki?.[Symbol.dispose]();
  });

  const open = (tls: ClientTlsFiles | undefined) => {
    const c = dispatcherClient(serve.address, tls);
    channels.push(c.channel);
    return c.client;
  };

  test('a client with a certificate the CA signed runs a tool', async () => {
    assert.deepEqual(await terminal(open(trusted), 'echo over-tls'), { output: 'over-tls', exit_code: 0, error: null });
  });

  test('a client without a certificate is refused at the handshake', async () => {
    const err = await rejection(terminal(open({ caFile: pki.ca.certFile }), 'echo no'));
    assert.equal(err.code, Status.UNAVAILABLE);
    assert.match(err.details, /certificate required/);
    const cli = await runCli(['call', 'terminal', '{"command":"echo no"}', '--server', serve.address, '--tls-ca', pki.ca.certFile]);
    assert.equal(cli.code, 6, 'the server could not be reached over the transport the flags chose');
    assert.match(cli.stderr, new RegExp(`^berth: the server at ${serve.address} requires a client certificate: pass --tls-cert FILE --tls-key FILE`));
    assert.equal(cli.stdout, '');
  });

  test('a client certificate from another CA is refused', async () => {
    const stranger = pki.clientCert('stranger', pki.untrustedCa);
    const err = await rejection(terminal(open({ ...trusted, certFile: stranger.certFile, keyFile: stranger.keyFile }), 'echo no'));
    assert.equal(err.code, Status.UNAVAILABLE);
    const cli = await runCli(['tools', '--server', serve.address, '--tls-ca', pki.ca.certFile, '--tls-cert', stranger.certFile, '--tls-key', stranger.keyFile]);
    assert.equal(cli.code, 6, 'the server could not be reached over the transport the flags chose');
    assert.match(cli.stderr, /refused the client certificate .*stranger\.crt: it must be signed by the CA in the server's server\.tls\.client_ca_file/);
  });

  test('a client that trusts another CA refuses the server', async () => {
    const err = await rejection(terminal(open({ ...trusted, caFile: pki.untrustedCa.certFile }), 'echo no'));
    assert.equal(err.code, Status.UNAVAILABLE);
    assert.match(err.details, /self-signed certificate in certificate chain|unable to verify/);
    const cli = await runCli(['tools', '--server', serve.address], {
      BERTH_TLS_CA: pki.untrustedCa.certFile,
      BERTH_TLS_CERT: client.certFile,
      BERTH_TLS_KEY: client.keyFile,
    });
    assert.equal(cli.code, 6, 'the server could not be reached over the transport the flags chose');
    assert.match(cli.stderr, /presented a certificate not signed by .*untrusted-test-ca\.crt: pass the CA that signed its server\.tls\.cert_file with --tls-ca/);
  });

  test('a plaintext client is told the server speaks TLS, and the server keeps serving', async () => {
    const err = await rejection(terminal(open(undefined), 'echo plain'));
    assert.equal(err.code, Status.UNAVAILABLE);
    const cli = await runCli(['call', 'terminal', '{"command":"echo plain"}', '--server', serve.address]);
    assert.equal(cli.code, 6, 'the server could not be reached over the transport the flags chose');
    assert.equal(
      cli.stderr.trim(),
      `berth: the server at ${serve.address} speaks TLS: pass --tls-ca FILE (the CA that signed its certificate; env BERTH_TLS_CA), and --tls-cert/--tls-key if it requires a client certificate`,
    );
    assert.deepEqual(await terminal(open(trusted), 'echo still-serving'), { output: 'still-serving', exit_code: 0, error: null });
  });

  test('call, tools and shell take --tls-* flags and BERTH_TLS_* variables', async () => {
    const flags = ['--tls-ca', pki.ca.certFile, '--tls-cert', client.certFile, '--tls-key', client.keyFile];
    const call = await runCli(['call', 'terminal', '{"command":"echo by-flags"}', '--server', serve.address, '--task', 'cli', ...flags]);
    assert.equal(call.code, 0, call.stderr);
    assert.deepEqual(JSON.parse(call.stdout), { output: 'by-flags', exit_code: 0, error: null });

    const env = { BERTH_SERVER: serve.address, BERTH_TLS_CA: pki.ca.certFile, BERTH_TLS_CERT: client.certFile, BERTH_TLS_KEY: client.keyFile };
    const tools = await runCli(['tools', '--toolsets', 'terminal'], env);
    assert.equal(tools.code, 0, tools.stderr);
    assert.ok((JSON.parse(tools.stdout) as Array<{ function: { name: string } }>).some((t) => t.function.name === 'terminal'));

    const shell = await runCli(['shell', '--task', 'cli'], env, '!echo by-env\n/quit\n');
    assert.equal(shell.code, 0, shell.stderr);
    assert.match(shell.stdout, /"output":"by-env"/);

    const half = await runCli(['tools', '--server', serve.address, '--tls-cert', client.certFile]);
    assert.equal(half.code, 2);
    assert.match(half.stderr, /needs both --tls-cert and --tls-key/);
  });

  test('SIGHUP: new connections get the new certificate, a live Session stream keeps working, a bad one is refused', async () => {
    const session = new SessionConnection(open(trusted), { onApproval: () => Promise.resolve('deny') });
    const call = async (command: string) =>
      JSON.parse(await session.call({ name: 'terminal', argumentsJson: JSON.stringify({ command }), taskId: 'hup', sessionId: '' })) as {
        output?: string;
      };
    try {
      assert.equal((await call('export STAGE=before; echo $STAGE')).output, 'before');
      assert.equal(await peerSerial(serve.address, pki.ca.certFile, client), live.serial);

      const second = pki.serverCert('server-2');
      copyFileSync(second.certFile, live.certFile);
      copyFileSync(second.keyFile, live.keyFile);
      let from = serve.stderr().length;
      serve.child.kill('SIGHUP');
      assert.match(await logLine(serve, /certificate reloaded/, from), new RegExp(second.serial));

      assert.equal((await call('echo $STAGE-after')).output, 'before-after', 'the stream opened before the reload still works');
      assert.equal(await peerSerial(serve.address, pki.ca.certFile, client), second.serial, 'a new connection gets the new certificate');
      assert.deepEqual(await terminal(open(trusted), 'echo new-channel'), { output: 'new-channel', exit_code: 0, error: null });

      // A certificate whose key is not the one on disk: logged, and the second certificate stays in force.
      const third = pki.serverCert('server-3');
      copyFileSync(third.certFile, live.certFile);
      from = serve.stderr().length;
      serve.child.kill('SIGHUP');
      const refused = await logLine(serve, /certificate not reloaded/, from);
      assert.match(refused, /key values mismatch/);
      assert.equal(await peerSerial(serve.address, pki.ca.certFile, client), second.serial);
      assert.equal((await call('echo $STAGE-again')).output, 'before-again');
      assert.equal(serve.child.exitCode, null, 'the server is still running');
    } finally {
      await session.close().catch(() => undefined);
    }
  });
});

describe('a TLS client at a plaintext server', () => {
  test('is told the server does not speak TLS', async () => {
    using pki = createTestPki();
    const serve = await startBerth(['serve'], { BERTH_STATE_ROOT: join(pki.dir, 'state') });
    try {
      const { channel, client } = dispatcherClient(serve.address, { caFile: pki.ca.certFile });
      const err = await rejection(terminal(client, 'echo no'));
      channel.close();
      assert.equal(err.code, Status.UNAVAILABLE);
      const cli = await runCli(['call', 'terminal', '{"command":"echo no"}', '--server', serve.address, '--tls-ca', pki.ca.certFile]);
      assert.equal(cli.code, 6, 'the server could not be reached over the transport the flags chose');
      assert.match(cli.stderr, new RegExp(`^berth: the server at ${serve.address} does not speak TLS: drop --tls-ca/--tls-cert/--tls-key`));
    } finally {
      await serve.stop();
    }
  });
});

describe('berth dispatcher ↔ berth executor over mTLS', () => {
  let pki: TestPki;
  let executor: ListeningChild;
  const dispatchers: ListeningChild[] = [];
  const channels: Channel[] = [];
  let executorCert: CertFiles;
  let liveCert: string;
  let liveKey: string;
  let dispatcherCert: CertFiles;
  const secret = { BERTH_EXECUTOR_SECRET: 'tls-test-secret' };

  const startDispatcher = async (name: string, entryTls: string, env: NodeJS.ProcessEnv = secret) => {
    const config = join(pki.dir, `${name}.yaml`);
    writeFileSync(config, `executors:\n  - address: "${executor.address}"\n    backend: local\n${entryTls}`);
    const d = await startBerth(['dispatcher', '--config', config], env);
    dispatchers.push(d);
    const { channel, client } = dispatcherClient(d.address, undefined);
    channels.push(channel);
    return { dispatcher: d, client };
  };
  const entry = (cert: CertFiles) =>
    `    tls: { ca_file: ${pki.ca.certFile}, cert_file: ${cert.certFile}, key_file: ${cert.keyFile} }\n`;

  before(async () => {
    pki = createTestPki();
    executorCert = pki.serverCert('executor-1');
    dispatcherCert = pki.clientCert('dispatcher');
    liveCert = join(pki.dir, 'executor-live.crt');
    liveKey = join(pki.dir, 'executor-live.key');
    copyFileSync(executorCert.certFile, liveCert);
    copyFileSync(executorCert.keyFile, liveKey);
    const config = join(pki.dir, 'executor.yaml');
    writeFileSync(config, `executor:\n  tls: { cert_file: ${liveCert}, key_file: ${liveKey}, client_ca_file: ${pki.ca.certFile} }\n`);
    executor = await startBerth(['executor', '--backend', 'local', '--config', config], {
      ...secret,
      BERTH_STATE_ROOT: join(pki.dir, 'executor-state'),
    });
  });

  after(async () => {
    for (const c of channels) c.close();
    await Promise.all([...dispatchers, executor].filter(Boolean).map((p) => p.stop()));
    pki?.[Symbol.dispose]();
  });

  test('a dispatcher with a client certificate the executor trusts runs tools; SIGHUP reloads the executor\'s certificate', async () => {
    const { client } = await startDispatcher('good', entry(dispatcherCert));
    assert.deepEqual(await terminal(client, 'export X=1; echo split-tls'), { output: 'split-tls', exit_code: 0, error: null });
    assert.equal(await peerSerial(executor.address, pki.ca.certFile, dispatcherCert), executorCert.serial);

    const second = pki.serverCert('executor-2');
    copyFileSync(second.certFile, liveCert);
    copyFileSync(second.keyFile, liveKey);
    const from = executor.stderr().length;
    executor.child.kill('SIGHUP');
    await logLine(executor, /executor\.tls: certificate reloaded/, from);
    assert.equal(await peerSerial(executor.address, pki.ca.certFile, dispatcherCert), second.serial);
    assert.deepEqual(await terminal(client, 'echo $X'), { output: '1', exit_code: 0, error: null }, 'the dispatcher\'s open connection keeps working');
  });

  test('a dispatcher whose client certificate another CA signed gets UNAVAILABLE naming the executor, until SIGHUP loads a good one', async () => {
    const stranger = pki.clientCert('stranger-dispatcher', pki.untrustedCa);
    const own: CertFiles = { certFile: join(pki.dir, 'own-dispatcher.crt'), keyFile: join(pki.dir, 'own-dispatcher.key'), serial: stranger.serial };
    copyFileSync(stranger.certFile, own.certFile);
    copyFileSync(stranger.keyFile, own.keyFile);
    const { client, dispatcher } = await startDispatcher('stranger', entry(own));
    const err = await rejection(terminal(client, 'echo no'));
    assert.equal(err.code, Status.UNAVAILABLE);
    assert.match(err.details, new RegExp(`^executor ${executor.address} refused this dispatcher's client certificate .*own-dispatcher\\.crt: it must be signed by the CA in the executor's executor\\.tls\\.client_ca_file`));
    // The start-up health check said so in the log already.
    assert.match(dispatcher.stderr(), /executor is not answering.*refused this dispatcher's client certificate/);

    copyFileSync(dispatcherCert.certFile, own.certFile);
    copyFileSync(dispatcherCert.keyFile, own.keyFile);
    const from = dispatcher.stderr().length;
    dispatcher.child.kill('SIGHUP');
    await logLine(dispatcher, /executors\[0\]\.tls .*client certificate reloaded/, from);
    assert.deepEqual(await terminal(client, 'echo fixed'), { output: 'fixed', exit_code: 0, error: null });
  });

  test('a dispatcher that connects in plaintext is told the executor speaks TLS', async () => {
    const { client } = await startDispatcher('plain', '');
    const err = await rejection(terminal(client, 'echo no'));
    assert.equal(err.code, Status.UNAVAILABLE);
    assert.equal(
      err.details,
      `executor ${executor.address} speaks TLS and this dispatcher connects in plaintext: set tls: {ca_file, cert_file, key_file} on its entry under executors:`,
    );
  });

  test('a dispatcher that trusts another CA refuses the executor\'s certificate', async () => {
    const { client } = await startDispatcher(
      'wrong-ca',
      `    tls: { ca_file: ${pki.untrustedCa.certFile}, cert_file: ${dispatcherCert.certFile}, key_file: ${dispatcherCert.keyFile} }\n`,
    );
    const err = await rejection(terminal(client, 'echo no'));
    assert.equal(err.code, Status.UNAVAILABLE);
    assert.match(err.details, new RegExp(`^executor ${executor.address} presented a certificate not signed by .*untrusted-test-ca\\.crt \\(executors\\[\\]\\.tls\\.ca_file\\)`));
  });

  test('the shared secret is still checked over mTLS', async () => {
    const { client } = await startDispatcher('wrong-secret', entry(dispatcherCert), { BERTH_EXECUTOR_SECRET: 'not-the-secret' });
    const err = await rejection(terminal(client, 'echo no'));
    assert.equal(err.code, Status.UNAUTHENTICATED);
    assert.match(err.details, /executor shared secret missing or wrong/);
  });
});
