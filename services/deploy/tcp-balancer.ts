/**
 * A small TCP balancer for deploy/compose.yaml: every connection goes to the
 * next address the backend name resolves to (all replicas of a compose
 * service), skipping ones that refuse. gRPC keeps one connection per client,
 * so a client sticks to one dispatcher until that connection breaks, then
 * reconnects through here to another.
 *
 *   node dist/services/deploy/tcp-balancer.js LISTEN_PORT BACKEND_NAME BACKEND_PORT
 */
import { lookup } from 'node:dns/promises';
import net from 'node:net';

const [listenPort = '', name = '', port = ''] = process.argv.slice(2);
if (!listenPort || !name || !port) {
  process.stderr.write('usage: tcp-balancer.js LISTEN_PORT BACKEND_NAME BACKEND_PORT\n');
  process.exit(2);
}
let next = 0;

async function addresses(): Promise<string[]> {
  try {
    return (await lookup(name, { all: true })).map((a) => a.address).sort();
  } catch {
    return [];
  }
}

function connectAny(list: string[], attempt: number, onSocket: (s: net.Socket) => void, onFail: () => void): void {
  if (attempt >= list.length) return onFail();
  const address = list[(next + attempt) % list.length]!;
  const upstream = net.connect({ host: address, port: Number(port) });
  upstream.once('connect', () => {
    upstream.removeAllListeners('error');
    next = (next + attempt + 1) % list.length;
    onSocket(upstream);
  });
  upstream.once('error', () => connectAny(list, attempt + 1, onSocket, onFail));
}

const server = net.createServer((client) => {
  client.pause();
  client.on('error', () => client.destroy());
  void addresses().then((list) =>
    connectAny(
      list,
      0,
      (upstream) => {
        upstream.on('error', () => client.destroy());
        upstream.on('close', () => client.destroy());
        client.on('close', () => upstream.destroy());
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      },
      () => client.destroy(),
    ),
  );
});
server.listen(Number(listenPort), '0.0.0.0', () => process.stdout.write(`balancer on :${listenPort} -> ${name}:${port}\n`));
for (const sig of ['SIGTERM', 'SIGINT']) process.once(sig, () => process.exit(0));
