/**
 * The `berth` command: picks the command by its first word. Servers: serve,
 * dispatcher, executor (server-commands.ts). Clients: tools, call, shell, mcp
 * (client-commands.ts); suspend, resume (suspend-commands.ts); snapshot, fork, snapshots, snapshot-delete
 * (snapshot-commands.ts). Local: check-command, doctor (local-commands.ts),
 * bench. Every failure is one line on stderr that says what to do; the exit
 * status says which kind (call-outcome.ts has the table).
 *
 * Start-up is part of every `berth call` a script makes, so what this file
 * and the command files import at the top stays light (no gRPC stack, no
 * config schema, no servers): each command loads what it uses once its flags
 * are parsed. test/unit/cli-lazy-load.test.ts holds that line.
 */
import { ConfigError } from '../common/config-error.js';
import { BenchUsageError, cmdBench } from './bench-command.js';
import { EXIT } from './call-outcome.js';
import { ClientTlsError, TransportError } from './client-options.js';
import { cmdCall, cmdMcp, cmdShell, cmdTools } from './client-commands.js';
import { COMMAND_NAMES, OVERVIEW_HELP, printCommandHelp } from './command-help.js';
import { cmdCheckCommand, cmdDoctor } from './local-commands.js';
import { cmdFork, cmdSnapshot, cmdSnapshotDelete, cmdSnapshots } from './snapshot-commands.js';
import { cmdDispatcher, cmdExecutor, cmdServe } from './server-commands.js';
import { cmdResume, cmdSuspend } from './suspend-commands.js';
import { UsageError, didYouMean, version } from './usage.js';

const COMMANDS: Record<string, (argv: string[]) => Promise<number>> = {
  serve: cmdServe,
  dispatcher: cmdDispatcher,
  executor: cmdExecutor,
  tools: cmdTools,
  call: cmdCall,
  shell: cmdShell,
  mcp: cmdMcp,
  snapshot: cmdSnapshot,
  fork: cmdFork,
  snapshots: cmdSnapshots,
  'snapshot-delete': cmdSnapshotDelete,
  'check-command': cmdCheckCommand,
  doctor: cmdDoctor,
  bench: cmdBench,
  suspend: cmdSuspend,
  resume: cmdResume,
};

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h') {
    process.stdout.write(OVERVIEW_HELP);
    return 0;
  }
  if (command === 'help') return rest[0] !== undefined && COMMANDS[rest[0]] === undefined ? unknownCommand(rest[0]) : printCommandHelp(rest[0] ?? '');
  if (command === '--version' || command === 'version') {
    process.stdout.write(`berth ${version()}\n`);
    return 0;
  }
  const run = COMMANDS[command];
  if (!run) return unknownCommand(command);
  try {
    return await run(rest);
  } catch (err) {
    const rpc = await rpcErrorOf(err);
    process.stderr.write(`berth: ${describeError(err, rpc)}\n`);
    return exitStatusOf(err, rpc);
  }
}

function unknownCommand(command: string): number {
  const hint = command.startsWith('-') ? `; flags go after the command, e.g. berth serve ${command}` : didYouMean(command, COMMAND_NAMES);
  process.stderr.write(`berth: unknown command '${command}'${hint} ('berth --help' lists the commands)\n`);
  return EXIT.usage;
}

/** A gRPC status a call failed with (a nice-grpc ClientError, or the client library's BerthError). */
interface RpcFailure {
  readonly code: number;
  readonly details: string;
  readonly unavailable: boolean;
  readonly name: string;
}

/**
 * The gRPC status `err` carries, if any. The gRPC modules are imported here
 * only on failure: a command that threw one of their errors has loaded them
 * already, so this costs nothing then.
 */
async function rpcErrorOf(err: unknown): Promise<RpcFailure | undefined> {
  if (!(err instanceof Error) || err instanceof UsageError || err instanceof BenchUsageError || err instanceof ConfigError) return undefined;
  if (err instanceof ClientTlsError || err instanceof TransportError) return undefined;
  const [{ ClientError, Status }, { BerthError }] = await Promise.all([import('../common/nice-grpc-common-cjs.js'), import('../client/errors.js')]);
  if (!(err instanceof ClientError || err instanceof BerthError)) return undefined;
  return { code: err.code, details: err.details, unavailable: err.code === Status.UNAVAILABLE, name: Status[err.code] };
}

/** The exit status of a command that failed (call-outcome.ts's table). */
function exitStatusOf(err: unknown, rpc: RpcFailure | undefined): number {
  if (err instanceof UsageError || err instanceof BenchUsageError || err instanceof ConfigError || err instanceof ClientTlsError) return EXIT.usage;
  if (err instanceof TransportError) return err.unreachable ? EXIT.unreachable : EXIT.refused;
  if (rpc) return rpc.unavailable ? EXIT.unreachable : EXIT.refused;
  return 1;
}

function describeError(err: unknown, rpc: RpcFailure | undefined): string {
  if (rpc) {
    if (rpc.unavailable) return `cannot reach the Berth server (${rpc.details}); is 'berth serve' running? Set --server or BERTH_SERVER`;
    return `${rpc.name}: ${rpc.details}`;
  }
  if (err instanceof Error) return err.message;
  return String(err);
}
