/**
 * `berth tools`, `call`, `shell` and `mcp`: commands that talk to a running
 * server. Parsing the flags and printing help load no gRPC stack; each
 * command loads what it uses (the channel, the MCP SDK) once it runs.
 */
import { randomBytes } from 'node:crypto';
import type { Metadata } from 'nice-grpc';
import type { openClient } from './client-connection.js';
import type { CallClient } from './http2-client.js';
import { CLIENT_OPTIONS, clientTarget, TransportError, type ClientFlags, type ClientTarget } from './client-options.js';
import { printCommandHelp } from './command-help.js';
import type { McpCommandOptions } from './mcp-command.js';
import { list, noPositionals, parse, UsageError, version } from './usage.js';

export { TransportError } from './client-options.js';

/** An open connection: the client and what closes it. */
interface Connection<C> {
  readonly channel: { close(): void };
  readonly client: C;
}

/**
 * Runs a client command against the server the flags name over `open`'s
 * connection; a transport failure comes out as one line saying what to do
 * (TLS flags, address).
 */
async function withConnection<K extends Connection<unknown>, T>(
  values: ClientFlags,
  open: (target: ClientTarget) => Promise<K>,
  run: (connection: K, target: ClientTarget) => Promise<T>,
): Promise<T> {
  const target = clientTarget(values, process.env);
  const [connection, { explainClientError }] = await Promise.all([open(target), import('./client-failure.js')]);
  try {
    return await run(connection, target);
  } catch (err) {
    const explained = await explainClientError(err, target);
    throw explained === undefined ? err : new TransportError(explained);
  } finally {
    connection.channel.close();
  }
}

/** withConnection over grpc-js: every Dispatcher method. */
export function withClient<T>(values: ClientFlags, run: (connection: ReturnType<typeof openClient>, target: ClientTarget) => Promise<T>): Promise<T> {
  return withConnection(values, async (target) => (await import('./client-connection.js')).openClient(target), run);
}

/**
 * withConnection over http2-client.ts (ListTools and Session, without
 * grpc-js's start-up), or over grpc-js for an address it does not dial.
 */
function withCallClient<T>(values: ClientFlags, run: (connection: Connection<CallClient>) => Promise<T>): Promise<T> {
  return withConnection(
    values,
    async (target): Promise<Connection<CallClient>> => {
      const { Http2Channel, openHttp2Client } = await import('./http2-client.js');
      return Http2Channel.handles(target.address) ? openHttp2Client(target) : (await import('./client-connection.js')).openClient(target);
    },
    run,
  );
}

export async function metadataFor(apiKey: string | undefined): Promise<Metadata> {
  const { Metadata } = await import('../common/nice-grpc-common-cjs.js');
  const metadata = new Metadata();
  const key = apiKey ?? process.env.BERTH_API_KEY;
  if (key) metadata.set('authorization', `Bearer ${key}`);
  return metadata;
}

export async function cmdTools(argv: string[]): Promise<number> {
  const { values, positionals } = parse('tools', argv, {
    ...CLIENT_OPTIONS,
    toolsets: { type: 'string' },
    disable: { type: 'string' },
    explain: { type: 'boolean' },
  });
  if (values.help) return printCommandHelp('tools');
  noPositionals('tools', positionals);
  const explain = values.explain === true;
  return withCallClient(values, async ({ client }) => {
    const r = await client.listTools(
      { enabledToolsets: list(values.toolsets), disabledToolsets: list(values.disable), explain },
      { metadata: await metadataFor(values['api-key']) },
    );
    if (r.unknownToolsets.length > 0) {
      process.stderr.write(`berth: unknown toolsets ignored: ${r.unknownToolsets.join(', ')}\n`);
    }
    if (!explain) {
      process.stdout.write(`${JSON.stringify(JSON.parse(r.toolsJson), null, 2)}\n`);
      return 0;
    }
    if (r.availabilityJson === '') throw new TransportError('the server does not support --explain (it predates it); upgrade it', false);
    process.stdout.write(`${JSON.stringify(JSON.parse(r.availabilityJson), null, 2)}\n`);
    return 0;
  });
}

export async function cmdCall(argv: string[]): Promise<number> {
  const { values, positionals } = parse('call', argv, {
    ...CLIENT_OPTIONS,
    task: { type: 'string' },
    session: { type: 'string' },
    'non-interactive': { type: 'boolean' },
  });
  if (values.help) return printCommandHelp('call');
  const { callPositionals, nonInteractiveFromEnv, runCall } = await import('./call-command.js');
  const { tool, argumentsJson } = callPositionals(positionals);
  const metadata = await metadataFor(values['api-key']);
  return withCallClient(values, ({ client }) =>
    runCall(client, {
      tool,
      argumentsJson,
      taskId: values.task ?? 'default',
      sessionId: values.session ?? '',
      nonInteractive: values['non-interactive'] === true || nonInteractiveFromEnv(process.env),
      metadata,
      stdout: process.stdout,
      stderr: process.stderr,
    }),
  );
}

export async function cmdShell(argv: string[]): Promise<number> {
  const { values, positionals } = parse('shell', argv, {
    ...CLIENT_OPTIONS,
    task: { type: 'string' },
    session: { type: 'string' },
    yolo: { type: 'boolean' },
  });
  if (values.help) return printCommandHelp('shell');
  noPositionals('shell', positionals);
  const id = randomBytes(4).toString('hex');
  const { runShell } = await import('./shell.js');
  const { explainClientError } = await import('./client-connection.js');
  const metadata = await metadataFor(values['api-key']);
  return withClient(values, ({ client }, target) =>
    runShell({
      client,
      metadata,
      taskId: values.task ?? `shell-${id}`,
      sessionId: values.session ?? `shell-${id}`,
      yolo: values.yolo === true,
      input: process.stdin,
      output: process.stdout,
      describeError: async (err) => (await explainClientError(err, target)) ?? (err as Error).message ?? String(err),
    }),
  );
}

export async function cmdMcp(argv: string[]): Promise<number> {
  const { values, positionals } = parse('mcp', argv, {
    ...CLIENT_OPTIONS,
    task: { type: 'string' },
    session: { type: 'string' },
    toolsets: { type: 'string' },
    disable: { type: 'string' },
    listen: { type: 'string' },
    'agent-loop-tools': { type: 'boolean' },
  });
  if (values.help) return printCommandHelp('mcp');
  noPositionals('mcp', positionals);
  const target = clientTarget(values, process.env);
  const { parseListen, runMcpStdio, startMcpHttp } = await import('./mcp-command.js');
  const { explainClientError } = await import('./client-connection.js');
  const options: McpCommandOptions = {
    server: target.address,
    ...(target.tls === undefined
      ? {}
      : {
          tls: {
            ...(target.tls.caFile === undefined ? {} : { ca: target.tls.caFile }),
            ...(target.tls.certFile === undefined ? {} : { cert: target.tls.certFile }),
            ...(target.tls.keyFile === undefined ? {} : { key: target.tls.keyFile }),
          },
        }),
    apiKey: values['api-key'] ?? process.env.BERTH_API_KEY,
    taskId: values.task,
    sessionId: values.session,
    toolsets: list(values.toolsets),
    disable: list(values.disable),
    agentLoopTools: values['agent-loop-tools'] === true,
    describeFailure: (err: unknown) => explainClientError(err, target),
    version: version(),
    stderr: process.stderr,
  };
  if (values.listen === undefined) return runMcpStdio(options);
  if (values.task !== undefined) throw new UsageError('--task is for stdio; over HTTP (--listen) each MCP session gets its own task, so drop --task');
  let listen: { host: string; port: number };
  try {
    listen = parseListen(values.listen);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const http = await startMcpHttp(options, listen);
  process.stdout.write(`berth mcp serving on ${http.url} (server ${options.server})\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
  await http.close();
  return 0;
}
