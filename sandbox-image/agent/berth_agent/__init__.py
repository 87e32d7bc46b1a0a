"""Berth's exec agent: runs inside a task's sandbox and does what the
executor asks over one byte stream: a Unix socket it dials, or its own
stdin/stdout (`--stdio`).

The executor listens on a socket in the per-task host directory that is
bind-mounted at /run/berth; this agent dials it (under gVisor the host cannot
connect to a socket created inside the sandbox, but a sandboxed process can
connect to one the host created). Standard library only, Python 3.8+, so any
image or host with python3 can run it; its modules parse on older Python 3,
and the archive's __main__.py checks the version before importing them, so
that it can say why it will not run there (exit status 4).

The package. Sandboxes get it as one file, berth_agent.pyz (a zipapp that
sandbox-image/agent/build.py makes of this package and ../__main__.py), run
as `python3 [-I -S] berth_agent.pyz ...`. Its modules: protocol (frames,
version, capabilities), streams (the two transports), agent (the main loop
and dispatch), processes (commands, output pacing, exits, kills), proc (one
command), prestart (pre-started shells), proctree (a command's process group
and session), counters (cgroup counters), terminal (PTYs), files, relay (the
socket relay), resume (a dropped stream), taskuser (--user, capabilities),
main (the command line). Unit tests:
sandbox-image/agent/tests/.

Transports. `berth_agent.pyz [--user UID:GID] [SOCKET [TOKEN_FILE]]` dials
the socket (the docker backend). `berth_agent.pyz --stdio` speaks the same frames on fd 0/1,
for any backend that can start one process with stdin/stdout in the sandbox
(`docker exec -i`, an ssh channel, `apptainer exec`). In stdio mode the
agent first moves the channel to private close-on-exec descriptors and
points fd 0 and 1 at /dev/null, so no command it runs can inherit, read or
write the channel; fd 2 stays the agent's log. There is no token in stdio
mode: the stream is the pipe pair of the process the executor started
itself, which nothing else in the sandbox holds, and the agent is not
dumpable, so /proc/PID/fd of the agent is closed to commands too.

Wire format (both directions): frames of

    u32 big-endian: length of the rest
    u32 big-endian: header length
    header: a JSON object (UTF-8)
    body: raw bytes (stdin, output, file content), possibly empty

Every request carries an integer "id" chosen by the executor; replies and
events carry the same id, so requests are multiplexed over the one socket.

executor -> agent
    spawn  {id, script, env, cwd, pty, keep_stdin}  body: first stdin bytes.
           `bash -c script` in a new session (its own process group).
           Replies: started {id, pid}; then out {id} with output bodies;
           then exit {id, code, signal, counters} once the process exited
           and its output reached EOF; counters holds the container's
           cgroup `oom_kill` and `pids_max` event counts. Or error
           {id, errno, message}.
    stdin  {id, proc}  body: bytes for process `proc`'s stdin -> ok | error
    eof    {id, proc}  close `proc`'s stdin (^D under a PTY) -> ok | error
    kill   {id, proc, grace_ms}  SIGTERM to the process group and session,
           SIGKILL after grace_ms if anything is left -> ok when none is
    read   {id, path, offset, length, max}  -> data {id, eof} body: up to
           min(length, FILE_CHUNK) bytes of the file from `offset` | error.
           Regular files only (errno ENOTREG, message: what it is);
           a file over `max` bytes is refused (errno EFBIG, message: its
           size). The executor reads a file as a series of these.
    write  {id, path, offset, last, write}  body: up to FILE_CHUNK bytes of
           content. Atomic (capability "atomic-write"): offset 0 creates
           parent directories and a temp file `.NAME.berth-XXXXXX` beside
           the file (beside a symlink's target: a write goes through the
           link), 0600 while written -> ok {id, write} where `write` names
           this write for the next chunks; each later chunk carries it and
           its offset (in order). The chunk with `last` set (the only chunk
           of a small file) fsyncs the temp file, gives it the old file's
           mode (and owner when allowed; a new file: 0666 less the umask)
           and renames it over the file -> ok. Regular files only, and an
           existing file must be writable, as for an in-place write. Any
           error removes the temp file; so do abort and a dropped stream.
    abort  {id, write}  drop write `write` and its temp file -> ok
    stat   {id, path}  -> stat {id, exists, is_dir, size, uid}
    ping   {id}  -> pong {id}

  The socket relay (capability "relay"): a Unix socket inside the sandbox
  whose connections are carried over this stream, so a process there (an
  execute_code script) talks to the executor without any path between the
  two but this one. Frames about a relay carry the listen request's id and,
  for a connection, its number `conn` (chosen by the agent).
    listen   {id, path}  makes path's directory (0700) unless it exists,
             binds a socket there (0600) -> ok | error
    unlisten {id, listener, remove}  closes listener `listener` and its
             connections, removes the socket and, when `remove` is set, that
             directory tree (a run dir) -> ok
    cdata    {id, conn}  body: bytes for the connection (no reply)
    cack     {id, conn, bytes}  the executor took `bytes` more of what the
             connection sent: the agent forwards at most RELAY_WINDOW bytes
             ahead of these (no reply)
    cshut    {id, conn}  shut the connection's writing side once what was
             sent is written (no reply)
    cclose   {id, conn}  close the connection (no reply)

agent -> executor, unasked
    conn     {id, conn}  a new connection on listener `id`
    cdata    {id, conn}  body: bytes the connection sent
    cend     {id, conn}  the connection shut its writing side
    cack     {id, conn, bytes}  `bytes` more of what the executor sent were
             written to the connection: the executor keeps at most
             RELAY_WINDOW bytes unacked, so a client that does not read its
             answers holds the executor's writes back instead of the agent
             queueing them
    cclosed  {id, conn}  the connection is gone (closed, reset, or over
             RELAY_MAX_QUEUE of unwritten bytes)
    hello  {id: 0, token, version, pid, python, transport, capabilities,
            resume_key, resumed}
           first frame after connecting; token is "" in stdio mode. The
           executor refuses any version but its own before sending anything.
           resume_key: 32 hex digits, this agent's secret for being found
           again after a dropped stream. resumed: true when this hello comes
           over a new stream to an agent that lingered (see below).

A dropped stream (capability "resume"). When the stream ends or fails
without a protocol fault, foreground processes end as before (their callers
got an error), relayed sockets close, and background ones (spawned with
`background: true`) keep running: the agent stops reading their output, so
it waits in their pipes (a full pipe blocks the writer; nothing is lost,
memory stays bounded). Then, for at most LINGER_SECONDS:
  socket mode: the agent dials the socket again every REDIAL_INTERVAL and
    says hello with token = resume_key and resumed = true; the executor
    accepts that only while it waits for this agent after a drop. The
    agent says it only to the listener it first reached (same SO_PEERCRED
    pid; commands can write the socket's directory and could listen there).
  stdio mode with `--linger PATH`: the agent listens on PATH (directory
    0700, socket 0600). `--stdio --linger PATH --resume PID` connects there
    and, when the peer is process PID (SO_PEERCRED), carries bytes between
    its stdio and the agent until either ends; otherwise it starts as a
    fresh agent. A stream that broke without the agent seeing it end (a
    PTY has no end of file; an SDK exec outlives its client) is told by the
    bridge: finding no socket, it sends SIGUSR1 to PID when PID's command
    line names this linger path, and the agent treats that as its stream
    dropping; the bridge then waits up to RESUME_KICK_SECONDS for the
    socket. The lingering agent takes a connection only if its first
    frame (within RESUME_AUTH_SECONDS, at most MAX_AUTH_FRAME bytes) is
      auth {id: 0, key}  key = resume_key (a fresh agent ignores it)
    and then says hello (resumed = true) on it.
  Then:
    resume {id, procs}  the background request ids the executor still
           tracks -> resumed {id, procs}: those of them this agent still has
           (running, or exited with output or exit not yet reported); it
           ends the others. Output and exit frames follow the answer.
  Without a linger path (stdio) or once LINGER_SECONDS pass, the agent ends
  everything and exits, as on any stream end before.
    bye    {id}  the executor is done: end everything now, no lingering.

Frame caps: the executor accepts frames of at most 1 MiB from the agent
(MAX_SEND_FRAME: output goes in 64 KiB reads, file content in FILE_CHUNK
pieces) and sends at most MAX_FRAME (16 MiB: a script as long as a tool
argument may be). Anything in the sandbox can connect to the executor's
socket, so the executor checks every frame; see agent-protocol.ts.

The task's user (`--user UID:GID`, capability "task-user"; socket mode).
The docker backend starts the agent as the container's root and gives it
the task's own uid and gid: every command runs as them, with their groups
(/etc/group) and no capability, so none can signal or ptrace the agent or
PID 1 (another user's), read the token file or connect to the executor's
socket (both the root's, 0600). The agent reads the token and dials first,
then keeps only CAP_SETUID and CAP_SETGID, takes the task's groups and
switches its effective ids to the task's: file operations, pipes, PTYs and
relayed sockets are done as the task's user and are its own (a command can
reopen /dev/stdin), signals reach exactly what it may signal. Only for a
spawn, and to dial the socket again, does it take uid 0 back for a moment;
each child sets its real, effective and saved ids to the task's before it
runs anything, so no command keeps a way back. The docker backend runs the
agent with `python3 -I -S`, so nothing a command can write (the script's
directory, a user site, sitecustomize, *.pth, PYTHON* variables) is on its
import path.

The token. The executor writes it to a file next to the socket
(/run/berth/agent-token) before the container starts; the agent reads it,
removes the file and only then connects, so no command of the task (they
all start later, through this agent) ever finds it: it is not in the
container's environment, nor in this process's environ or argv. The agent
also makes itself non-dumpable, so commands running as the same user cannot
ptrace it or read its memory. The executor accepts one hello per container
start, whatever token a later connection presents.

When the executor says bye, or the stream dropped and nobody resumed it
in time, the agent kills everything it started and exits, which ends the
container: nothing runs on with nobody listening.

Pre-started shells. Starting bash (fork, exec, its own start-up) is most of
what a short command costs. So the agent keeps one bash started ahead, in
its own session, with stdin and output pipes ready, waiting for its script
on one more pipe: `bash -c '. /dev/fd/N' bash`. A spawn without a PTY and
without extra environment, for the cwd it was started in, takes it: the
agent writes the script and closes that pipe, bash reads the script whole
(`source` reads to EOF before it runs anything), closes fd N (the first line
the agent adds) and runs it; `$0` is `bash` as with `bash -c`. Another one is
started once that process exits, off the command's path. Any other spawn
starts bash as before.
"""
