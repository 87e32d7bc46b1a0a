/**
 * Where one execute_code run keeps its files and its socket: the run dir
 * with hermes_tools.py, script.py, rpc.sock and the head of stderr. Two
 * ways, one shape:
 *
 * - in a directory the executor shares with the sandbox (rpcDir: local,
 *   docker): made through a descriptor the sandbox cannot redirect
 *   (run-dir.ts), the socket is the executor's own;
 * - inside the sandbox itself, through its exec agent (rpcRelay: ssh, singularity, and
 *   any backend whose agent speaks over a stream): the agent makes the dir
 *   and the socket as the sandbox user, and relays each connection over its
 *   stream; the files go through the agent's file operations.
 *
 * Either way the same RpcSocketServer answers the script, so limits, token
 * checks and error strings are one code path.
 */
import path from 'node:path';
import type { BackendEnvironment, RelayedSocket, RpcRelay } from '../backend.js';
import { RpcSocketServer, type RpcServeOptions } from './rpc-socket-server.js';
import { RunDir } from './run-dir.js';

export interface RunFiles {
  readonly stubModule: string;
  readonly code: string;
}

export interface RunStaging {
  /** The run dir as the script sees it. */
  readonly sandboxDir: string;
  /** Stops answering the script (its connections end). */
  closeServer(): Promise<void>;
  /** Up to `maxBytes` of a file the script's launcher wrote there; empty when there is none. */
  readHead(name: string, maxBytes: number): Promise<Buffer>;
  /** Stops the server and removes the run dir. */
  remove(): Promise<void>;
}

/** A run dir in the directory shared with the sandbox (`owner`: the sandbox user, when it differs from ours). */
export async function stageInSharedDir(
  rpcDir: { readonly hostPath: string; readonly sandboxPath: string },
  runName: string,
  files: RunFiles,
  serve: RpcServeOptions,
  owner: { uid: number; gid: number } | undefined,
): Promise<RunStaging> {
  const dir = await RunDir.create(rpcDir.hostPath, runName);
  let server: RpcSocketServer | undefined;
  try {
    await dir.writeNew('hermes_tools.py', files.stubModule);
    await dir.writeNew('script.py', files.code);
    server = await RpcSocketServer.listen({ ...serve, path: dir.entry('rpc.sock'), ...(owner ? { owner } : {}) });
    // Only now may the sandbox user touch the dir: everything in it is ours until here.
    if (owner) await dir.handTo(owner, ['hermes_tools.py', 'script.py']);
  } catch (err) {
    await server?.close();
    await dir.remove().catch(() => undefined);
    throw err;
  }
  const listening = server;
  return {
    sandboxDir: path.posix.join(rpcDir.sandboxPath, runName),
    closeServer: () => listening.close(),
    readHead: (name, maxBytes) => dir.readHead(name, maxBytes),
    remove: async () => {
      await listening.close();
      await dir.remove();
    },
  };
}

/** A run dir inside the sandbox, its socket relayed by the exec agent. */
export async function stageInSandbox(
  env: BackendEnvironment,
  relay: RpcRelay,
  runName: string,
  files: RunFiles,
  serve: RpcServeOptions,
): Promise<RunStaging> {
  const sandboxDir = path.posix.join(relay.sandboxDir, runName);
  const server = RpcSocketServer.serve(serve);
  let socket: RelayedSocket | undefined;
  try {
    // The agent makes the dir (0700) and the socket (0600) first: the files then land in a private dir.
    socket = await relay.listen(path.posix.join(sandboxDir, 'rpc.sock'), (connection) => server.accept(connection));
    await env.writeFile(path.posix.join(sandboxDir, 'hermes_tools.py'), Buffer.from(files.stubModule, 'utf8'));
    await env.writeFile(path.posix.join(sandboxDir, 'script.py'), Buffer.from(files.code, 'utf8'));
  } catch (err) {
    await server.close();
    await socket?.close(sandboxDir).catch(() => undefined);
    throw err;
  }
  const relayed = socket;
  return {
    sandboxDir,
    closeServer: () => server.close(),
    readHead: async (name, maxBytes) => {
      try {
        return (await env.readFile(path.posix.join(sandboxDir, name))).subarray(0, Math.max(0, maxBytes));
      } catch {
        return Buffer.alloc(0);
      }
    },
    remove: async () => {
      await server.close();
      await relayed.close(sandboxDir);
    },
  };
}
