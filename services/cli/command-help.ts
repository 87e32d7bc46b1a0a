/**
 * The `berth` command's help: an overview, and for every command its
 * synopsis, what it does, its flags and an example. `berth COMMAND --help`
 * and `berth help COMMAND` print the command's own.
 */
import { BACKEND_NAMES } from '../common/backend-names.js';
import { EXIT_TABLE } from './call-outcome.js';

const DEFAULT_SERVER = '127.0.0.1:7700';

const CLIENT_FLAGS = `Reaching the server:
  --server ADDR       dispatcher address (env BERTH_SERVER, default ${DEFAULT_SERVER})
  --api-key KEY       sent as 'authorization: Bearer KEY' (env BERTH_API_KEY)
  --tls-ca FILE       connect with TLS, trusting the server by this CA (env
                      BERTH_TLS_CA); any --tls-* flag turns TLS on, and without
                      --tls-ca the system's CAs are trusted
  --tls-cert FILE     client certificate, for a server with server.tls.client_ca_file
  --tls-key FILE      its private key (env BERTH_TLS_CERT, BERTH_TLS_KEY)`;

const CLIENT_SYNOPSIS = '[--server ADDR] [--api-key KEY] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]';

const SERVER_FLAGS = `  --config FILE       the YAML config (env BERTH_CONFIG); every key: docs/configuration.md
  --port N            port to listen on (0: any free one)
  --host H            address to listen on
  --log-level L       fatal, error, warn, info (default), debug, trace, silent
  --metrics-port N    serve Prometheus metrics on http://HOST:N/metrics
                      (HOST: metrics.host, 127.0.0.1 by default)`;

const exitTable = EXIT_TABLE.map(([code, meaning]) => `  ${code}  ${meaning}`).join('\n');

export const COMMAND_HELP: Readonly<Record<string, string>> = {
  serve: `Usage: berth serve [--port N] [--host H] [--config FILE] [--backend NAME] [--log-level L] [--metrics-port N]

A dispatcher and one in-process executor on 127.0.0.1:7700, backend local by
default: the one process an agent backend needs. The start-up line says where
new tasks start; on the local backend that is the directory berth serve was
started in, or terminal.cwd (TERMINAL_CWD). SIGTERM or Ctrl-C stops it; with
TLS configured, SIGHUP re-reads the certificates.

Flags:
  --backend NAME      ${BACKEND_NAMES.join(', ')}, or a backend package (terminal.backend)
${SERVER_FLAGS}

Example:
  TERMINAL_CWD=~/berth-workspace berth serve --backend docker
`,
  dispatcher: `Usage: berth dispatcher --config FILE [--port N] [--host H] [--log-level L] [--metrics-port N]

The dispatcher alone: it routes each task to an executor from 'executors:'
in the config file, or from DNS names under 'executor_discovery:'.

Flags:
${SERVER_FLAGS}

Example:
  berth dispatcher --config /etc/berth/dispatcher.yaml
`,
  executor: `Usage: berth executor --backend NAME [--config FILE] [--port N] [--host H] [--log-level L] [--metrics-port N]

One executor for one terminal backend (default port 7701). SIGTERM drains it:
no new tasks, and calls in flight get executor.drain_grace_ms to finish.

Flags:
  --backend NAME      ${BACKEND_NAMES.join(', ')}, or a backend package (required)
${SERVER_FLAGS}
  (metrics: port 9465 by default, so an executor fits beside a dispatcher)

Example:
  BERTH_EXECUTOR_SECRET=... berth executor --backend docker --host 0.0.0.0
`,
  tools: `Usage: berth tools [--toolsets a,b] [--disable a,b] [--explain] ${CLIENT_SYNOPSIS}

Print the tools the server offers, as a JSON array of OpenAI tool objects.
--explain prints instead which toolsets are available and, for the others,
the variables they need and why they are missing.

Flags:
  --toolsets a,b      only these toolsets' tools
  --disable a,b       without these toolsets' tools
  --explain           {"available": [...], "unavailable": [{"name", "env_vars", "tools", "reason"}], ...}
${CLIENT_FLAGS}

Example:
  berth tools --toolsets terminal,file
`,
  call: `Usage: berth call TOOL [ARGS_JSON] [--task ID] [--session ID] [--non-interactive] ${CLIENT_SYNOPSIS}

Run one tool call and print its result JSON on stdout, exactly as the model
would read it; hints for a failed call go to stderr. ARGS_JSON (default {})
must be one JSON object, and is checked before anything is sent. A command
that needs approval is asked about on the terminal (o/s/a/d); without a
terminal it is denied, unless --non-interactive lets the server's
approvals.non_interactive policy decide (approve by default; deny for
cron-like jobs).

Flags:
  --task ID           the task (environment: cwd, variables, processes) the call
                      runs in (default: default)
  --session ID        the session that approvals given "for this session" belong to
  --non-interactive   nobody will answer approvals: approvals.non_interactive
                      decides (env BERTH_NON_INTERACTIVE=true)
${CLIENT_FLAGS}

Exit status:
${exitTable}

Example:
  berth call terminal '{"command":"make test"}' --task ci --non-interactive
`,
  snapshot: `Usage: berth snapshot TASK [--label L] ${CLIENT_SYNOPSIS}

Snapshot a task's environment: its files (workspace, home and every change to
the container's filesystem) and shell state (cwd, exported variables,
functions); running processes only where the backend checkpoints memory
(includes_processes says which). Prints the snapshot as JSON. The snapshot
belongs to your tenant and counts against quotas.max_snapshots and
quotas.max_snapshot_mb. Backends: docs/lifecycle.md.

Flags:
  --label L           free text kept with the snapshot (at most 256 characters)
${CLIENT_FLAGS}

Example:
  berth snapshot base --label "deps installed"
`,
  fork: `Usage: berth fork (SNAPSHOT_ID | TASK) --task NEW [--label L] ${CLIENT_SYNOPSIS}

Make task NEW from a snapshot, or from a task (a snapshot of it is taken
first and kept: --label names it). NEW starts with the snapshot's files, cwd,
variables and functions, and then lives on its own. Prints the new task id and
the snapshot as JSON.

Flags:
  --task NEW          the task to make (it must not exist yet)
  --label L           the label of the snapshot taken when forking from a task
${CLIENT_FLAGS}

Example:
  berth fork snap_0123456789abcdef01234567 --task try-1
  berth fork base --task try-2
`,
  snapshots: `Usage: berth snapshots ${CLIENT_SYNOPSIS}

List your tenant's snapshots as JSON, newest first: id, label, source task,
backend, time, size and what a fork of each gets.

${CLIENT_FLAGS}

Example:
  berth snapshots
`,
  'snapshot-delete': `Usage: berth snapshot-delete SNAPSHOT_ID ${CLIENT_SYNOPSIS}

Delete one of your snapshots. Tasks forked from it keep working.

${CLIENT_FLAGS}

Example:
  berth snapshot-delete snap_0123456789abcdef01234567
`,
  shell: `Usage: berth shell [--task ID] [--session ID] [--yolo] ${CLIENT_SYNOPSIS}

An interactive prompt for trying tools by hand: type TOOL [ARGS_JSON], or
!COMMAND for terminal; /task ID, /session ID, /yolo on|off, /help, /quit.
Commands that need approval are asked about on the terminal.

Flags:
  --task ID           the task to start in (default: a new shell-XXXXXXXX)
  --session ID        the session for approvals (default: as the task)
  --yolo              run this session's commands without approval prompts
                      (hardline blocks still apply)
${CLIENT_FLAGS}

Example:
  berth shell --task t1
  berth> !ls -la
`,
  mcp: `Usage: berth mcp [--task ID] [--session ID] [--toolsets a,b] [--disable a,b] [--agent-loop-tools] ${CLIENT_SYNOPSIS}
       berth mcp --listen HOST:PORT [--toolsets a,b] [--disable a,b] [--agent-loop-tools] ${CLIENT_SYNOPSIS}

Serve Berth's tools to MCP clients. Over stdio (for a desktop client) one
MCP session is one Berth task (ID, or a generated mcp-XXXXXXXX), ended when
the client disconnects. With --listen, streamable HTTP at http://HOST:PORT/mcp,
one Berth task per MCP session; a request's 'Authorization: Bearer KEY' is
its session's Berth API key (else --api-key). Commands that need approval
are asked through the client's elicitation support; without it the server's
approvals.non_interactive policy decides.

Flags:
  --task ID           stdio only: the Berth task of the session
  --session ID        the session for approvals
  --toolsets a,b      only these toolsets' tools
  --disable a,b       without these toolsets' tools
  --agent-loop-tools  also list todo_list, memory, session_search and
                      delegate_task, which an MCP client's own agent loop must
                      handle (Berth answers them with an error)
  --listen HOST:PORT  serve streamable HTTP instead of stdio
${CLIENT_FLAGS}

Example (Claude Desktop, claude_desktop_config.json):
  {"mcpServers": {"berth": {"command": "berth",
    "args": ["mcp", "--server", "127.0.0.1:7700", "--task", "desktop"],
    "env": {"BERTH_API_KEY": "..."}}}}
`,
  'check-command': `Usage: berth check-command [--home DIR] 'COMMAND' | -

Classify a command as the approval guard would, without a server and without
running it ('-' reads it from stdin). Prints one JSON line:
{"verdict":"allow"|"approve"|"block","pattern_key":...,"description":...}
Exit 0 allow, 3 approve (needs approval), 4 block (hardline), 2 usage error.

Flags:
  --home DIR          home directory folded to ~ before matching (default: yours)

Example:
  berth check-command 'git push --force origin main' || [ $? -eq 3 ]
`,
  doctor: `Usage: berth doctor [--config FILE] [--backend NAME]

Check that the configured backend works here: start it, run a command in a
throwaway task (twice: a new task, then a warm one), release it. One line per
finding: ok, warn (works, but weaker or slower than it could be), fail (with
what to do). Exit 0 when nothing failed, else 1.

Flags:
  --config FILE       the YAML config (env BERTH_CONFIG)
  --backend NAME      ${BACKEND_NAMES.join(', ')}, or a backend package

Example:
  berth doctor --backend docker
`,
  bench: `Usage: berth bench [--quick] [--only NAME[,NAME]] [--smoke] [--compare OLD.json] [--json FILE]

Measure Berth beside baselines (bare gRPC, bash, docker exec, ...),
interleaved on this machine; write bench-results/<date>-<sha>.{json,md,svg}.
Needs a source checkout; also 'make bench [BENCH_FLAGS=--quick]'. Cases that
measure against a test double need it named: BERTH_BENCH_STANDINS (the
stand-ins' script), BERTH_BENCH_APPTAINER (an apptainer-compatible CLI);
'make bench' names the checkout's.

Flags:
  --quick             a two-minute budget (its minimum work takes longer on a busy machine)
  --only NAME         suites (case file names), or else parts of case names
  --smoke             each case a few times, no files; non-zero only if a case fails
  --compare OLD.json  after the run, print each case's ratio to its baseline
                      beside the same ratio in an earlier results file, with
                      the change (10% or more marked better or worse)
  --json FILE         also write this run's results to FILE (any mode)

Examples:
  berth bench --quick --only terminal-docker
  berth bench --quick --compare bench-results/2026-11-30-69d7964a.json
`,
  suspend: `Usage: berth suspend TASK ${CLIENT_SYNOPSIS}

Suspend the task's environment: no CPU, its memory freed as far as the
backend can (docker: the container is stopped); files, volumes, the working
directory and exported variables are kept, and the task's next call resumes
it by itself. Background processes end unless the backend keeps them; the
next command's result says so. Prints {"suspended": bool, "processes_kept":
bool}; suspended is false when the task has no environment. Refused while a
call runs on the task, and on backends that cannot suspend (berth doctor).

Flags:
${CLIENT_FLAGS}

Example:
  berth suspend t1
`,
  resume: `Usage: berth resume TASK ${CLIENT_SYNOPSIS}

Resume a suspended task's environment now, so its next call does not wait
for it. Prints {"resumed": bool}; false when the task has no environment or
was not suspended.

Flags:
${CLIENT_FLAGS}

Example:
  berth resume t1
`,
};

export const OVERVIEW_HELP = `berth — runs AI agents' tool calls in sandboxes, as a gRPC service

Usage: berth COMMAND [FLAGS]      ('berth COMMAND --help': its flags and an example)

Servers:
  serve           dispatcher and one executor in one process (local backend by default)
  dispatcher      the dispatcher alone; executors come from the config file
  executor        one executor for one backend
Clients of a running server:
  tools           print the tools the server offers
  call            run one tool call and print its result
  shell           try tools by hand at a prompt
  mcp             serve Berth's tools to MCP clients (stdio or HTTP)
  suspend         suspend a task's environment (its next call resumes it)
  resume          resume a suspended task's environment now
  snapshot        snapshot a task (files and shell state)
  fork            make a new task from a snapshot or a task
  snapshots       list your snapshots
  snapshot-delete delete a snapshot
Without a server:
  check-command   classify a command as the approval guard would
  doctor          check that a backend works on this host
  bench           measure Berth beside baselines

Config: one YAML file (--config or BERTH_CONFIG); TERMINAL_* and BERTH_*
variables override it; every key is in docs/configuration.md.
Backends: ${BACKEND_NAMES.join(', ')}, or a backend package (docs/backends/writing-a-backend.md).
Version: berth --version.

Example:
  berth serve &
  berth call terminal '{"command":"pwd"}' --task t1
`;

export const COMMAND_NAMES = Object.keys(COMMAND_HELP);

/** A command's own help on stdout (the overview for one it does not know); exit 0. */
export function printCommandHelp(command: string): number {
  process.stdout.write(COMMAND_HELP[command] ?? OVERVIEW_HELP);
  return 0;
}
