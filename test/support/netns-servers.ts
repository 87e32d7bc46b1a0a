/**
 * Servers a network test owns, so it never aims traffic at an address it
 * did not set up: a network namespace joined to the host by a veth pair,
 * given the addresses the test names (link-local, private, a documentation
 * range standing in for "public") and routed from the host, with a TCP
 * server answering on all of them and, optionally, a DNS server answering
 * every A query with one address. Everything is removed by `close()`.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** A TCP server: answers `berth-netiso LABEL LOCAL-ADDRESS` to every connection. */
export const ECHO_SERVER_PY = `
import socket, sys
s = socket.socket(socket.AF_INET6 if ':' in sys.argv[3] else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[3], int(sys.argv[1])))
s.listen(64)
print('listening', flush=True)
while True:
    c, _ = s.accept()
    try:
        c.settimeout(2)
        c.recv(64)
        c.sendall(('berth-netiso %s %s\\n' % (sys.argv[2], c.getsockname()[0])).encode())
    except OSError:
        pass
    c.close()
`;

/** Connects to HOST PORT with a timeout; prints `got:REPLY` or `err:EXCEPTION`. */
export const CLIENT_PY = `
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
    s.sendall(b'hi\\n')
    print('got:' + s.recv(200).decode().strip())
except Exception as e:
    print('err:' + type(e).__name__)
`;

/**
 * A DNS server on UDP ADDRESS:53 answering every A query with argv[1], every
 * other query with no answer. Bound to its address, so replies come from it.
 */
const DNS_SERVER_PY = `
import socket, struct, sys
answer = socket.inet_aton(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[2], 53))
print('listening', flush=True)
while True:
    q, peer = s.recvfrom(512)
    end = q.index(b'\\0', 12) + 5
    qtype = struct.unpack('!H', q[end - 4:end - 2])[0]
    an = 1 if qtype == 1 else 0
    head = q[:2] + struct.pack('!HHHHH', 0x8180, 1, an, 0, 0)
    body = q[12:end]
    if an:
        body += struct.pack('!HHHIH', 0xc00c, 1, 1, 60, 4) + answer
    s.sendto(head + body, peer)
`;

/** `python3 -c` of a script, as a shell word safe to paste into a command. */
export function pythonCommand(script: string, args: readonly string[]): string {
  const b64 = Buffer.from(script).toString('base64');
  return `python3 -c "$(echo ${b64} | base64 -d)" ${args.map((a) => `'${a}'`).join(' ')}`;
}

export interface NetnsServers {
  readonly name: string;
  /** The host's end of the veth (routes to the namespace's addresses go through it). */
  readonly hostIf: string;
  readonly port: number;
  close(): Promise<void>;
}

async function waitForLine(child: ChildProcess, what: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not start`)), 10_000);
    child.stdout?.once('data', () => {
      clearTimeout(timer);
      resolve();
    });
    child.once('exit', (code) => reject(new Error(`${what} exited ${code}`)));
  });
}

const NAMESPACE = /^bnt-([0-9a-f]{8})(?:-p(\d+))?$/;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes the namespaces (with their servers, host veth and routes) that a
 * test process no longer running left behind, e.g. a run killed part-way:
 * their host end holds the transfer address and routes a new namespace needs.
 * A namespace names the pid of the process that made it.
 */
export async function removeStaleNetns(): Promise<string[]> {
  const removed: string[] = [];
  const list = await run('ip', ['netns', 'list']).then((r) => r.stdout, () => '');
  for (const line of list.split('\n')) {
    const name = line.split(' ')[0] ?? '';
    const m = NAMESPACE.exec(name);
    if (!m || (m[2] !== undefined && alive(Number(m[2])))) continue;
    const pids = await run('ip', ['netns', 'pids', name]).then((r) => r.stdout.split(/\s+/).filter(Boolean), () => []);
    for (const pid of pids) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // already gone
      }
    }
    // Deleting the host end removes its peer and the routes through it.
    await run('ip', ['link', 'del', `bnth${m[1]}`]).catch(() => undefined);
    await run('ip', ['netns', 'del', name]).catch(() => undefined);
    removed.push(name);
  }
  return removed;
}

/**
 * A namespace holding `addresses` (each routed from the host as a /32),
 * with the echo server on `port` and, when `dns` is given, a DNS server on
 * `dns.address` port 53 answering every name with `dns.answer`.
 */
export async function startNetnsServers(
  addresses: readonly string[],
  port: number,
  dns?: { readonly address: string; readonly answer: string },
): Promise<NetnsServers> {
  await removeStaleNetns();
  const tag = randomBytes(4).toString('hex');
  const name = `bnt-${tag}-p${process.pid}`;
  const hostIf = `bnth${tag}`;
  const nsIf = `bntn${tag}`;
  // A /30 joins the two ends; the host end masquerades nothing itself, Docker's NAT does.
  const transfer = { host: '10.79.255.1', ns: '10.79.255.2' };
  const children: ChildProcess[] = [];
  const ip = (...args: string[]) => run('ip', args);
  const close = async () => {
    for (const c of children) c.kill('SIGKILL');
    for (const a of addresses) await ip('route', 'del', `${a}/32`, 'dev', hostIf).catch(() => undefined);
    await ip('link', 'del', hostIf).catch(() => undefined);
    await ip('netns', 'del', name).catch(() => undefined);
  };
  try {
    await ip('netns', 'add', name);
    await ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf);
    await ip('link', 'set', nsIf, 'netns', name);
    await ip('addr', 'add', `${transfer.host}/30`, 'dev', hostIf);
    await ip('link', 'set', hostIf, 'up');
    await ip('-n', name, 'addr', 'add', `${transfer.ns}/30`, 'dev', nsIf);
    for (const a of addresses) await ip('-n', name, 'addr', 'add', `${a}/32`, 'dev', nsIf);
    await ip('-n', name, 'link', 'set', nsIf, 'up');
    await ip('-n', name, 'link', 'set', 'lo', 'up');
    await ip('-n', name, 'route', 'add', 'default', 'via', transfer.host);
    for (const a of addresses) await ip('route', 'add', `${a}/32`, 'dev', hostIf);
    const echo = spawn('ip', ['netns', 'exec', name, 'python3', '-c', ECHO_SERVER_PY, String(port), name, '0.0.0.0'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(echo);
    await waitForLine(echo, `the echo server in ${name}`);
    if (dns) {
      const server = spawn('ip', ['netns', 'exec', name, 'python3', '-c', DNS_SERVER_PY, dns.answer, dns.address], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      children.push(server);
      await waitForLine(server, `the DNS server in ${name}`);
    }
  } catch (err) {
    await close();
    throw err;
  }
  return { name, hostIf, port, close };
}
