#!/usr/bin/env python3
"""Berth's exec agent: runs inside a task's sandbox and does what the
executor asks over one byte stream: a Unix socket it dials, or its own
stdin/stdout (`--stdio`).

The executor listens on a socket in the per-task host directory that is
bind-mounted at /run/berth; this agent dials it (under gVisor the host cannot
connect to a socket created inside the sandbox, but a sandboxed process can
connect to one the host created). Standard library only, Python 3.8+, so any
image or host with python3 can run it; the file itself parses on older
Python 3 so that it can say why it will not run there (exit status 4).

Transports. `berth_agent.py [SOCKET [TOKEN_FILE]]` dials the socket (the
docker backend). `berth_agent.py --stdio` speaks the same frames on fd 0/1,
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

import errno
import fcntl
import hmac
import json
import os
import pty
import selectors
import shutil
import signal
import socket
import stat as stat_module
import struct
import subprocess
import sys
import termios
import time

VERSION = 2
# The oldest Python this file is written for (and tested against the syntax of).
MIN_PYTHON = (3, 8)
# What this agent can do, announced in its hello; the executor may check for an item before using it.
CAPABILITIES = ["spawn", "pty", "background", "files", "counters", "prestart", "relay", "resume", "atomic-write"]
# Largest frame accepted from the executor, and sent to it (its own cap).
MAX_FRAME = 16 * 1024 * 1024
MAX_SEND_FRAME = 1024 * 1024
# File content per read reply / write request.
FILE_CHUNK = 256 * 1024
# Writes between their first and last chunk at once (the executor has one per file call in flight).
MAX_PENDING_WRITES = 64
# Bytes of a file's name kept in its temp file's name (`.NAME.berth-XXXXXX` stays under NAME_MAX).
TEMP_STEM_BYTES = 200
TEMP_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
# Symlinks followed from a write's path (the kernel's own limit).
MAX_SYMLINK_HOPS = 40
# Error messages are cut to this many characters, so an error frame stays small.
MAX_ERROR_MESSAGE = 4096
READ_CHUNK = 64 * 1024
# Scripts up to this size go to a pre-started shell: what an empty pipe takes without waiting.
SCRIPT_PIPE_BYTES = 60 * 1024
# After a kill, how long to wait for output pipes that a process outside the
# group still holds before closing them ourselves.
DRAIN_AFTER_KILL = 1.0
# Output the agent forwards to the executor, all processes of the task
# together: a burst, then a sustained rate. Past them the agent reads more
# slowly and a flooding process blocks on its full pipe, so a flood costs the
# executor (shared by every tenant) at most this rate, and loses nothing.
OUTPUT_BURST = 16 * 1024 * 1024
OUTPUT_RATE = 4 * 1024 * 1024
PTY_ROWS, PTY_COLS = 50, 200
# The socket relay: bytes forwarded on one connection ahead of the executor's
# acks; connections per listener; bytes queued toward one connection before
# it is dropped (a client that sends requests and never reads the answers).
RELAY_WINDOW = 256 * 1024
RELAY_MAX_CONNECTIONS = 64
RELAY_MAX_QUEUE = 64 * 1024 * 1024
# Counters reported with every exit, so the executor can tell that a limit
# of the container (memory, pids) hit the command: name -> (files, line key).
# A dropped stream: how long the agent keeps background processes waiting for
# the executor to come back before it ends everything; how often it redials
# (socket mode); how long a connection to its linger socket (stdio mode) has
# to prove itself, and the largest frame it may do that with.
LINGER_SECONDS = 600.0
REDIAL_INTERVAL = 0.5
RESUME_AUTH_SECONDS = 2.0
# How long a `--resume` bridge waits for the socket of an agent it told that its stream is gone (SIGUSR1).
RESUME_KICK_SECONDS = 3.0
MAX_AUTH_FRAME = 4096
COUNTERS = {
    "oom_kill": (("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"), "oom_kill"),
    "pids_max": (("/sys/fs/cgroup/pids.events", "/sys/fs/cgroup/pids/pids.events"), "max"),
}


def read_counter(path, key):
    try:
        with open(path, "rb") as f:
            for line in f.read().decode("ascii", "replace").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
                    return int(parts[1])
    except OSError:
        pass
    return None


def find_counters():
    """The first readable file of each counter (cgroup v2, then v1)."""
    found = {}
    for name, (paths, key) in COUNTERS.items():
        for path in paths:
            if read_counter(path, key) is not None:
                found[name] = (path, key)
                break
    return found


def log(message):
    try:
        sys.stderr.write("berth-agent: %s\n" % message)
        sys.stderr.flush()
    except Exception:
        pass


def encode_frame(header, body=b""):
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return struct.pack(">II", 4 + len(head) + len(body), len(head)) + head + body


def errno_name(err):
    code = getattr(err, "errno", None)
    if code is None:
        return "EIO"
    return errno.errorcode.get(code, "EIO")


def tree_members(pgid):
    """Pids of live processes in process group `pgid` or in session `pgid`.

    A command starts in a new session whose id is its leader's pid, so its
    group and session ids both equal that pid. A process that moved to
    another group of the session (bash job control does) is still found
    through the session; only one that called setsid() itself escapes.
    """
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                data = f.read()
        except OSError:
            continue
        # After the command name: state ppid pgrp session ...
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) > 3 and fields[0] != b"Z" and (int(fields[2]) == pgid or int(fields[3]) == pgid):
            pids.append(int(entry))
    return pids


def signal_tree(pgid, sig):
    """Signals the command's process group and its session; False when none is left."""
    found = False
    try:
        os.killpg(pgid, sig)
        found = True
    except OSError:
        pass
    for pid in tree_members(pgid):
        try:
            os.kill(pid, sig)
            found = True
        except OSError:
            pass
    return found


class Proc(object):
    """One spawned `bash -c` and its pipes (or PTY master)."""

    def __init__(self, agent, req_id, pid, out_fds, stdin_fd, pty_slave):
        self.agent = agent
        self.id = req_id
        self.pid = pid
        self.out_fds = set(out_fds)
        self.stdin_fd = stdin_fd
        # Under a PTY the agent keeps a slave fd open until the process is
        # reaped: otherwise the last close hangs the terminal up and Linux may
        # discard output the reader has not taken yet.
        self.pty_slave = pty_slave
        self.is_pty = pty_slave is not None
        self.stdin_queue = bytearray()
        self.stdin_closed = False
        self.stdin_last_newline = True
        self.status = None  # (code, signal) once reaped
        self.kill_phase = None  # None, "term" or "kill"
        self.kill_until = 0.0
        self.kill_replies = []
        self.drain_deadline = None
        self.pty_settle = None
        self.reported = False
        self.popen = None
        self.cwd = None  # where it started: the next pre-started shell starts there too
        # A background process outlives a dropped stream; while the agent has
        # no stream its output is left in its pipes (paused), nothing lost.
        self.background = False
        self.paused = False
        # A foreground process whose caller went with the stream: ended, and
        # forgotten without a report.
        self.abandoned = False

    # --- stdin ---------------------------------------------------------

    def write_stdin(self, data):
        if self.status is not None:
            raise OSError(errno.ESRCH, "the process has exited")
        if self.stdin_fd is None or self.stdin_closed:
            raise OSError(errno.EPIPE, "stdin is closed")
        if data:
            self.stdin_last_newline = data[-1:] == b"\n"
            self.stdin_queue += data
            self.flush_stdin()

    def close_stdin(self):
        if self.stdin_fd is None or self.stdin_closed:
            return
        self.stdin_closed = True
        if self.is_pty:
            # ^D is EOF only at the start of a line; a first one flushes a partial line.
            self.stdin_queue += b"\x04" if self.stdin_last_newline else b"\x04\x04"
        self.flush_stdin()

    def flush_stdin(self):
        fd = self.stdin_fd
        if fd is None:
            return
        while self.stdin_queue:
            try:
                n = os.write(fd, bytes(self.stdin_queue[:READ_CHUNK]))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                # EPIPE: the process stopped reading; what it did not take is dropped.
                self.stdin_queue = bytearray()
                break
            del self.stdin_queue[:n]
        if self.is_pty:
            self.agent.watch_pty(self, bool(self.stdin_queue))
            return
        self.agent.watch_stdin(self, bool(self.stdin_queue))
        if not self.stdin_queue and self.stdin_closed:
            self.agent.drop_stdin(self)


class Ready(object):
    """A shell started ahead, waiting for its script on `script_w`."""

    def __init__(self, popen, cwd, script_w, script_fd_number, in_w, out_r, err_r):
        self.popen = popen
        self.cwd = cwd
        self.script_w = script_w
        self.script_fd_number = script_fd_number
        self.in_w = in_w
        self.out_r = out_r
        self.err_r = err_r


class Listener(object):
    """A relayed Unix socket: where it is and its live connections."""

    def __init__(self, req_id, sock, path):
        self.id = req_id
        self.sock = sock
        self.path = path
        self.conns = {}  # conn number -> Conn


class Conn(object):
    """One connection to a relayed socket."""

    def __init__(self, listener, number, sock):
        self.listener = listener
        self.number = number
        self.sock = sock
        self.unacked = 0  # forwarded bytes the executor has not acked yet
        self.out = bytearray()  # bytes from the executor not written yet
        self.read_eof = False
        self.shut_wanted = False
        self.events = 0  # what the selector watches for now


class SocketStream(object):
    """The channel over the Unix socket the agent dialled."""

    transport = "socket"

    def __init__(self, sock):
        self.sock = sock

    def fileno(self):
        return self.sock.fileno()

    def recv(self, size):
        return self.sock.recv(size)

    def sendall(self, data):
        self.sock.sendall(data)

    def close(self):
        self.sock.close()


class StdioStream(object):
    """The channel over two descriptors (what were the agent's stdin and stdout)."""

    transport = "stdio"

    def __init__(self, in_fd, out_fd):
        self.in_fd = in_fd
        self.out_fd = out_fd

    def fileno(self):
        return self.in_fd

    def recv(self, size):
        return os.read(self.in_fd, size)

    def sendall(self, data):
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.out_fd, view)
            except InterruptedError:
                continue
            view = view[n:]

    def close(self):
        for fd in (self.in_fd, self.out_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def take_stdio():
    """Moves the channel off fd 0/1 to private close-on-exec descriptors; 0 and 1 become /dev/null.

    Commands get their own pipes for 0-2 and inherit nothing else, but a
    library the agent loads, or a child started without explicit stdio,
    would otherwise read or write the channel itself.
    """
    in_fd = fcntl.fcntl(0, fcntl.F_DUPFD, 10)
    out_fd = fcntl.fcntl(1, fcntl.F_DUPFD, 10)
    for fd in (in_fd, out_fd):
        os.set_inheritable(fd, False)
    # Frames are written whole (sendall); a non-blocking pipe would cut one short.
    os.set_blocking(out_fd, True)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return StdioStream(in_fd, out_fd)


class Agent(object):
    def __init__(self, sock, token, redial_path=None, linger_path=None, redial_peer=None):
        # `sock`: a SocketStream or StdioStream (anything with fileno, recv, sendall, close);
        # None while the stream is down (see detach()).
        self.sock = sock
        self.transport = sock.transport
        self.token = token
        # Presented instead of the token when the agent dials in again (socket
        # mode) or asked of whoever connects to the linger socket (stdio mode).
        # It goes only over the stream the executor already trusts, never to
        # a file or the environment, and the agent is not dumpable.
        self.resume_key = os.urandom(16).hex()
        self.redial_path = redial_path
        # Who listened there the first time (SO_PEERCRED pid: 0 when outside our pid namespace). The socket's
        # directory is writable by commands, so one could move the executor's socket aside and listen in its
        # place: the agent never presents its resume key to another listener.
        self.redial_peer = redial_peer
        self.linger_path = linger_path
        self.detached_until = None  # while the stream is down: when to give up and end everything
        self.next_redial = 0.0
        self.linger_sock = None
        self.sel = selectors.DefaultSelector()
        self.procs = {}  # request id -> Proc
        self.by_pid = {}  # pid -> Proc
        self.inbuf = bytearray()
        self.base_env = dict(os.environ)
        for name in ("BERTH_AGENT_TOKEN", "BERTH_AGENT_SOCKET"):
            self.base_env.pop(name, None)
        self.running = True
        self.counters = find_counters()
        self.ready = None  # a pre-started shell (Ready), or None
        self.listeners = {}  # listen request id -> Listener
        self.writes = {}  # write number -> PendingWrite (an atomic write between its first and last chunk)
        self.next_write = 1
        self.next_conn = 1
        self.out_budget = float(OUTPUT_BURST)
        self.out_stamp = time.monotonic()
        # A pre-started shell reads its script through /dev/fd; without it, start bash per command.
        self.prestart = os.path.isdir("/dev/fd")
        # Signals only wake the loop: the wakeup fd receives the signal number.
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        # Stdio mode with a linger path: SIGUSR1 from a `--resume` bridge says the stream broke unseen.
        # (Commands run as our user and could send it; they could as well kill us. It costs a resume.)
        self.stale = False
        if linger_path is not None:
            signal.signal(signal.SIGUSR1, self.on_stale)
        self.sel.register(self.sock, selectors.EVENT_READ, ("sock", None))
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))

    def on_term(self, *_):
        self.running = False

    def on_stale(self, *_):
        self.stale = True

    # --- sending ---------------------------------------------------------

    def send(self, header, body=b""):
        frame = encode_frame(header, body)
        if len(frame) - 4 > MAX_SEND_FRAME:
            # The executor would close the connection; answer with an error instead.
            log("frame of %d bytes for %s is over the cap" % (len(frame), header.get("op")))
            frame = encode_frame({"op": "error", "id": header.get("id"), "errno": "EMSGSIZE",
                                  "message": "reply too large"})
        if self.sock is None:
            return  # no stream: nobody to tell; background output waits in its pipes
        try:
            self.sock.sendall(frame)
        except OSError as err:
            log("send failed: %s" % err)
            self.detach()

    def send_error(self, req_id, err, message=None):
        name = err if isinstance(err, str) else errno_name(err)
        if message is None:
            message = getattr(err, "strerror", None) or str(err)
        message = message[:MAX_ERROR_MESSAGE]
        self.send({"op": "error", "id": req_id, "errno": name, "message": message})

    # --- main loop -------------------------------------------------------

    def send_hello(self, resumed):
        self.send({"op": "hello", "id": 0, "token": self.token if not resumed else self.resume_key,
                   "version": VERSION, "pid": os.getpid(), "python": "%d.%d.%d" % tuple(sys.version_info[:3]),
                   "transport": self.transport, "capabilities": CAPABILITIES, "resume_key": self.resume_key,
                   "resumed": resumed})

    def run(self):
        self.send_hello(False)
        # Used once: the executor accepts no second hello with it (a resume presents resume_key).
        self.token = None
        while self.running:
            try:
                events = self.sel.select(self.next_timeout())
            except InterruptedError:
                events = []
            for key, mask in events:
                kind, proc = key.data
                if kind == "sock":
                    self.on_socket()
                elif kind == "wake":
                    self.on_wake()
                elif kind == "out":
                    if mask & selectors.EVENT_WRITE:
                        proc.flush_stdin()
                    if mask & selectors.EVENT_READ:
                        self.on_output(proc, key.fd)
                elif kind == "stdin":
                    proc.flush_stdin()
                elif kind == "listen":
                    self.on_accept(proc)
                elif kind == "relay":
                    self.on_relay(proc, mask)
                elif kind == "linger":
                    self.on_linger()
                if not self.running:
                    break
            if self.stale:
                self.stale = False
                log("told that the stream broke (SIGUSR1); detaching")
                self.detach()
            self.reap()
            self.on_timers()
        self.shutdown()

    def next_timeout(self):
        timeout = 5.0 if self.sock is not None else REDIAL_INTERVAL
        now = time.monotonic()
        for proc in self.procs.values():
            if proc.kill_phase is not None:
                timeout = min(timeout, 0.02)
            for deadline in (proc.drain_deadline, proc.pty_settle):
                if deadline is not None:
                    timeout = min(timeout, max(0.0, deadline - now))
        return timeout

    def on_wake(self):
        try:
            while os.read(self.wake_r, 512):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def on_socket(self):
        try:
            data = self.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            log("connection error: %s" % err)
            self.detach()
            return
        if not data:
            self.detach()
            return
        self.inbuf += data
        while len(self.inbuf) >= 8:
            total, head_len = struct.unpack(">II", bytes(self.inbuf[:8]))
            if total > MAX_FRAME or total < 4 or head_len > total - 4:
                log("bad frame (length %d, header %d); closing" % (total, head_len))
                self.running = False
                return
            if len(self.inbuf) < 4 + total:
                break
            header = json.loads(bytes(self.inbuf[8:8 + head_len]).decode("utf-8"))
            body = bytes(self.inbuf[8 + head_len:4 + total])
            del self.inbuf[:4 + total]
            self.dispatch(header, body)
            if self.sock is None:
                return

    def dispatch(self, header, body):
        op = header.get("op")
        req_id = header.get("id")
        try:
            if op == "spawn":
                self.op_spawn(req_id, header, body)
            elif op == "stdin":
                self.lookup(header).write_stdin(body)
                self.send({"op": "ok", "id": req_id})
            elif op == "eof":
                self.lookup(header).close_stdin()
                self.send({"op": "ok", "id": req_id})
            elif op == "kill":
                self.op_kill(req_id, header)
            elif op == "read":
                self.op_read(req_id, header)
            elif op == "write":
                self.op_write(req_id, header, body)
            elif op == "abort":
                pending = self.writes.pop(header.get("write"), None)
                if pending is not None:
                    pending.abort()
                self.send({"op": "ok", "id": req_id})
            elif op == "stat":
                self.op_stat(req_id, header["path"])
            elif op == "ping":
                self.send({"op": "pong", "id": req_id})
            elif op == "listen":
                self.op_listen(req_id, header["path"])
            elif op == "unlisten":
                self.op_unlisten(req_id, header)
            elif op in ("cdata", "cack", "cshut", "cclose"):
                self.op_relay(op, header, body)
            elif op == "resume":
                self.op_resume(req_id, header)
            elif op == "bye":
                # The executor is done with this sandbox: end everything now, do not wait for it.
                self.running = False
            elif op == "auth":
                pass  # meant for a lingering agent (stdio mode); this one started fresh
            else:
                self.send_error(req_id, "EINVAL", "unknown op %r" % (op,))
        except OSError as err:
            self.send_error(req_id, err)
        except Exception as err:  # a bug here must not take the agent down
            log("%s failed: %r" % (op, err))
            self.send_error(req_id, "EIO", "%s failed: %s" % (op, err))

    def lookup(self, header):
        proc = self.procs.get(header.get("proc"))
        if proc is None:
            raise OSError(errno.ESRCH, "the process has exited")
        return proc

    # --- processes -------------------------------------------------------

    def op_spawn(self, req_id, header, body):
        if req_id in self.procs:
            raise OSError(errno.EEXIST, "request id in use")
        cwd = header.get("cwd") or "/"
        if not os.path.isdir(cwd):
            cwd = "/"
        proc = None
        if not header.get("pty") and not header.get("env"):
            proc = self.take_ready(req_id, cwd, header["script"])
        if proc is not None:
            self.start_proc(proc, header, body)
            return
        env = dict(self.base_env)
        env.update(header.get("env") or {})
        argv = ["bash", "-c", header["script"]]
        if header.get("pty"):
            master, slave = pty.openpty()
            try:
                fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", PTY_ROWS, PTY_COLS, 0, 0))
                pid = self.fork_exec(argv, env, cwd, slave, slave, slave, ctty=slave)
            except BaseException:
                os.close(master)
                os.close(slave)
                raise
            os.set_blocking(master, False)
            proc = Proc(self, req_id, pid, [master], master, slave)
        else:
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            try:
                # subprocess uses vfork here: several times faster than os.fork
                # from Python, and this is every command's path.
                popen = subprocess.Popen(argv, stdin=in_r, stdout=out_w, stderr=err_w, cwd=cwd, env=env,
                                         start_new_session=True, close_fds=True, restore_signals=True)
            except BaseException as err:
                for fd in (in_w, out_r, err_r):
                    os.close(fd)
                if isinstance(err, OSError):
                    raise OSError(err.errno, "cannot start bash: %s" % (err.strerror or err))
                raise
            finally:
                for fd in (in_r, out_w, err_w):
                    os.close(fd)
            pid = popen.pid
            for fd in (in_w, out_r, err_r):
                os.set_blocking(fd, False)
            proc = Proc(self, req_id, pid, [out_r, err_r], in_w, None)
            proc.popen = popen
        proc.cwd = cwd
        self.start_proc(proc, header, body)

    def start_proc(self, proc, header, body):
        proc.background = bool(header.get("background"))
        self.procs[proc.id] = proc
        self.by_pid[proc.pid] = proc
        for fd in proc.out_fds:
            self.sel.register(fd, selectors.EVENT_READ, ("out", proc))
        self.send({"op": "started", "id": proc.id, "pid": proc.pid})
        if body:
            proc.write_stdin(body)
        if not header.get("keep_stdin"):
            proc.close_stdin()

    # --- pre-started shells --------------------------------------------

    def start_ready(self, cwd):
        """Starts the next shell ahead of its command; failures only cost the head start."""
        if self.ready is not None or not self.running or not self.prestart:
            return
        fds = []
        try:
            script_r, script_w = os.pipe()
            fds += [script_r, script_w]
            in_r, in_w = os.pipe()
            fds += [in_r, in_w]
            out_r, out_w = os.pipe()
            fds += [out_r, out_w]
            err_r, err_w = os.pipe()
            fds += [err_r, err_w]
            popen = subprocess.Popen(["bash", "-c", ". /dev/fd/%d" % script_r, "bash"], stdin=in_r, stdout=out_w,
                                     stderr=err_w, cwd=cwd, env=self.base_env, start_new_session=True,
                                     close_fds=True, pass_fds=(script_r,), restore_signals=True)
        except Exception as err:
            for fd in fds:
                os.close(fd)
            log("cannot pre-start a shell: %s" % err)
            return
        for fd in (script_r, in_r, out_w, err_w):
            os.close(fd)
        for fd in (script_w, in_w, out_r, err_r):
            os.set_blocking(fd, False)
        self.ready = Ready(popen, cwd, script_w, script_r, in_w, out_r, err_r)
        self.by_pid[popen.pid] = self.ready

    def take_ready(self, req_id, cwd, script):
        """The pre-started shell as the process of request `req_id`, or None when there is none that fits."""
        ready = self.ready
        if ready is None:
            return None
        # The script pipe is closed by the script's first line: nothing the command runs inherits it.
        data = ("exec %d<&-\n" % ready.script_fd_number + script).encode("utf-8", "surrogateescape")
        if len(data) > SCRIPT_PIPE_BYTES:
            return None
        if ready.cwd != cwd:
            self.drop_ready()
            return None
        self.ready = None
        try:
            # Non-blocking: an empty pipe normally takes this much at once.
            written = os.write(ready.script_w, data)
        except OSError as err:
            written = err
        if written != len(data):
            # A shell must never run part of a script: kill it before its pipe reaches EOF.
            log("pre-started shell %d did not take its script at once (%s)" % (ready.popen.pid, written))
            signal_tree(ready.popen.pid, signal.SIGKILL)
            self.discard_ready(ready)
            return None
        os.close(ready.script_w)
        ready.script_w = None
        proc = Proc(self, req_id, ready.popen.pid, [ready.out_r, ready.err_r], ready.in_w, None)
        proc.popen = ready.popen
        proc.cwd = cwd
        return proc

    def drop_ready(self):
        """Lets the pre-started shell go: with its script pipe closed it sources nothing and exits."""
        ready, self.ready = self.ready, None
        if ready is not None:
            self.discard_ready(ready)

    def discard_ready(self, ready):
        for fd in (ready.script_w, ready.in_w, ready.out_r, ready.err_r):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        ready.script_w = ready.in_w = ready.out_r = ready.err_r = None

    def fork_exec(self, argv, env, cwd, stdin_fd, stdout_fd, stderr_fd, ctty=None):
        """Forks and execs; raises OSError when the exec failed. Our own fds
        are close-on-exec (Python's default), so the child inherits only 0-2."""
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                if ctty is not None:
                    fcntl.ioctl(ctty, termios.TIOCSCTTY, 0)
                os.dup2(stdin_fd, 0)
                os.dup2(stdout_fd, 1)
                os.dup2(stderr_fd, 2)
                # Python ignores SIGPIPE, and an ignored signal stays ignored across exec.
                signal.set_wakeup_fd(-1)
                for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
                os.chdir(cwd)
                os.execvpe(argv[0], argv, env)
            except BaseException as err:
                try:
                    os.write(err_w, ("%s:%s" % (errno_name(err), getattr(err, "strerror", None) or err)).encode(
                        "utf-8", "replace"))
                finally:
                    os._exit(127)
        os.close(err_w)
        failure = b""
        while True:
            try:
                chunk = os.read(err_r, 4096)
            except InterruptedError:
                continue
            if not chunk:
                break
            failure += chunk
        os.close(err_r)
        if failure:
            while True:
                try:
                    os.waitpid(pid, 0)
                    break
                except InterruptedError:
                    continue
                except ChildProcessError:
                    break
            name, _, message = failure.decode("utf-8", "replace").partition(":")
            raise OSError(getattr(errno, name, errno.EIO), "cannot start bash: %s" % message)
        return pid

    def pace_output(self):
        """Waits until the output budget allows another read (at most one chunk's worth of time)."""
        now = time.monotonic()
        self.out_budget = min(OUTPUT_BURST, self.out_budget + (now - self.out_stamp) * OUTPUT_RATE)
        self.out_stamp = now
        if self.out_budget < 0:
            time.sleep(-self.out_budget / OUTPUT_RATE)
            self.out_budget = 0.0
            self.out_stamp = time.monotonic()

    def on_output(self, proc, fd):
        self.pace_output()
        try:
            data = os.read(fd, READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # EIO from a PTY master whose terminal hung up
        if data:
            self.out_budget -= len(data)
            self.send({"op": "out", "id": proc.id}, data)
            return
        self.close_output(proc, fd)

    def close_output(self, proc, fd):
        if fd not in proc.out_fds:
            return
        proc.out_fds.discard(fd)
        try:
            self.sel.unregister(fd)
        except (KeyError, ValueError):
            pass
        if fd == proc.stdin_fd:
            proc.stdin_fd = None  # the PTY master carried both directions
        try:
            os.close(fd)
        except OSError:
            pass
        if proc.pty_slave is not None and not proc.out_fds:
            os.close(proc.pty_slave)
            proc.pty_slave = None
        self.maybe_finish(proc)

    def watch_stdin(self, proc, want):
        fd = proc.stdin_fd
        registered = fd is not None and fd in self.sel.get_map()
        if want and fd is not None and not registered:
            self.sel.register(fd, selectors.EVENT_WRITE, ("stdin", proc))
        elif not want and registered:
            self.sel.unregister(fd)

    def watch_pty(self, proc, want):
        fd = proc.stdin_fd
        if fd is not None and fd in proc.out_fds:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
            self.sel.modify(fd, events, ("out", proc))

    def drop_stdin(self, proc):
        """Closes a pipe stdin (EOF for the process)."""
        fd = proc.stdin_fd
        if fd is None or proc.is_pty:
            return
        self.watch_stdin(proc, False)
        proc.stdin_fd = None
        try:
            os.close(fd)
        except OSError:
            pass

    def reap(self):
        """Collects every exited child: ours, and orphans inherited as PID 1."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid == 0:
                return
            if os.WIFSIGNALED(status):
                result = (None, os.WTERMSIG(status))
            elif os.WIFEXITED(status):
                result = (os.WEXITSTATUS(status), None)
            else:
                continue
            proc = self.by_pid.get(pid)
            if proc is None:
                continue
            if isinstance(proc, Ready):
                # Killed before it had a command (say `pkill bash`), or let go: start another when needed.
                proc.popen.returncode = result[0] if result[0] is not None else -result[1]
                self.by_pid.pop(pid, None)
                if proc is self.ready:
                    self.ready = None
                    self.discard_ready(proc)
                continue
            proc.status = result
            if proc.popen is not None:
                # We reaped it: subprocess must never waitpid() this pid again (it may be reused).
                proc.popen.returncode = result[0] if result[0] is not None else -result[1]
            proc.stdin_queue = bytearray()
            if proc.is_pty:
                # Let the terminal hand over what the process wrote last.
                proc.pty_settle = time.monotonic() + 0.02
            else:
                self.drop_stdin(proc)
            self.maybe_finish(proc)

    def maybe_finish(self, proc):
        if proc.reported or proc.status is None or proc.out_fds or proc.kill_phase is not None or proc.paused:
            return
        proc.reported = True
        if proc.abandoned:
            del self.procs[proc.id]
            self.by_pid.pop(proc.pid, None)
            return
        code, sig = proc.status
        counters = {}
        for name, (path, key) in self.counters.items():
            value = read_counter(path, key)
            if value is not None:
                counters[name] = value
        self.send({"op": "exit", "id": proc.id, "code": code, "signal": sig, "counters": counters})
        del self.procs[proc.id]
        self.by_pid.pop(proc.pid, None)
        # The next command's shell starts now, while the result travels back.
        if proc.cwd is not None:
            self.start_ready(proc.cwd)

    def op_kill(self, req_id, header):
        proc = self.procs.get(header.get("proc"))
        if proc is None:
            # Its exit was reported already and nothing of it is left to kill.
            self.send({"op": "ok", "id": req_id})
            return
        proc.kill_replies.append(req_id)
        if proc.kill_phase is not None:
            return
        if not signal_tree(proc.pid, signal.SIGTERM):
            self.kill_done(proc)
            return
        proc.kill_phase = "term"
        proc.kill_until = time.monotonic() + max(0, int(header.get("grace_ms", 1000))) / 1000.0

    def kill_done(self, proc):
        proc.kill_phase = None
        for req_id in proc.kill_replies:
            self.send({"op": "ok", "id": req_id})
        proc.kill_replies = []
        if proc.out_fds and proc.pty_slave is None:
            proc.drain_deadline = time.monotonic() + DRAIN_AFTER_KILL
        self.maybe_finish(proc)

    def on_timers(self):
        now = time.monotonic()
        if self.sock is None and self.running:
            self.while_detached(now)
        for proc in list(self.procs.values()):
            if proc.kill_phase is not None:
                if not tree_members(proc.pid):
                    self.kill_done(proc)
                elif proc.kill_phase == "term" and now >= proc.kill_until:
                    signal_tree(proc.pid, signal.SIGKILL)
                    proc.kill_phase = "kill"
                    proc.kill_until = now + 1.0
                elif proc.kill_phase == "kill" and now >= proc.kill_until:
                    log("process group %d survived SIGKILL" % proc.pid)
                    self.kill_done(proc)
            if proc.paused:
                continue  # its output stays in the pipe until the executor is back
            if proc.pty_settle is not None and now >= proc.pty_settle and proc.kill_phase is None:
                proc.pty_settle = None
                for fd in list(proc.out_fds):
                    self.drain_now(proc, fd)
            if proc.drain_deadline is not None and now >= proc.drain_deadline:
                proc.drain_deadline = None
                # Whoever still holds the pipes is outside the group; stop waiting for them.
                for fd in list(proc.out_fds):
                    self.close_output(proc, fd)

    def drain_now(self, proc, fd):
        """Forwards what is readable right now, then closes `fd`."""
        while True:
            try:
                data = os.read(fd, READ_CHUNK)
            except (BlockingIOError, InterruptedError, OSError):
                break
            if not data:
                break
            self.send({"op": "out", "id": proc.id}, data)
        self.close_output(proc, fd)

    # --- files -----------------------------------------------------------

    def open_regular(self, path, flags):
        """Opens without blocking (a FIFO would block open(2) forever); anything but a regular file is refused."""
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            info = os.fstat(fd)
            if stat_module.S_ISDIR(info.st_mode):
                raise OSError(errno.EISDIR, "is a directory")
            if not stat_module.S_ISREG(info.st_mode):
                raise NotRegular(file_kind(info.st_mode))
            return fd, info
        except BaseException:
            os.close(fd)
            raise

    def op_read(self, req_id, header):
        path = header["path"]
        offset = max(0, int(header.get("offset", 0)))
        length = max(0, min(int(header.get("length", FILE_CHUNK)), FILE_CHUNK))
        limit = int(header.get("max", 0))
        try:
            fd, info = self.open_regular(path, os.O_RDONLY)
        except NotRegular as err:
            self.send_error(req_id, "ENOTREG", err.kind)
            return
        except OSError as err:
            if err.errno == errno.ENXIO:  # open(2) of a socket
                self.send_error(req_id, "ENOTREG", "socket")
                return
            raise
        try:
            if limit > 0 and offset == 0 and info.st_size > limit:
                self.send_error(req_id, "EFBIG", str(info.st_size))
                return
            data = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        self.send({"op": "data", "id": req_id, "eof": len(data) < length}, data)

    def op_write(self, req_id, header, body):
        offset = max(0, int(header.get("offset", 0)))
        last = header.get("last", True) is not False
        if offset == 0:
            if len(self.writes) >= MAX_PENDING_WRITES:
                raise OSError(errno.EBUSY, "too many writes in progress")
            try:
                pending = PendingWrite.begin(header["path"])
            except NotRegular as err:
                self.send_error(req_id, "ENOTREG", err.kind)
                return
            number = self.next_write
            self.next_write += 1
        else:
            number = header.get("write")
            pending = self.writes.pop(number, None)
            if pending is None:
                raise OSError(errno.EBADF, "no such write in progress")
        try:
            if offset != pending.size:
                raise OSError(errno.EINVAL, "write chunk out of order")
            pending.append(body)
            if last:
                pending.commit()
            else:
                self.writes[number] = pending
        except BaseException:
            pending.abort()
            raise
        self.send({"op": "ok", "id": req_id, "write": number})

    def abort_writes(self):
        for pending in list(self.writes.values()):
            pending.abort()
        self.writes.clear()

    def op_stat(self, req_id, path):
        try:
            info = os.stat(path)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR):
                self.send({"op": "stat", "id": req_id, "exists": False, "is_dir": False, "size": 0, "uid": -1})
                return
            raise
        self.send({"op": "stat", "id": req_id, "exists": True, "is_dir": stat_module.S_ISDIR(info.st_mode),
                   "size": info.st_size, "uid": info.st_uid})

    # --- socket relay ----------------------------------------------------

    def op_listen(self, req_id, path):
        if req_id in self.listeners:
            raise OSError(errno.EEXIST, "request id in use")
        parent = os.path.dirname(path) or "."
        try:
            os.mkdir(parent, 0o700)
        except FileExistsError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Nobody may connect before the mode is 0600: bind under a umask that leaves only us.
            old_umask = os.umask(0o177)
            try:
                sock.bind(path)
            finally:
                os.umask(old_umask)
            os.chmod(path, 0o600)
            sock.listen(RELAY_MAX_CONNECTIONS)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        listener = Listener(req_id, sock, path)
        self.listeners[req_id] = listener
        self.sel.register(sock, selectors.EVENT_READ, ("listen", listener))
        self.send({"op": "ok", "id": req_id})

    def op_unlisten(self, req_id, header):
        listener = self.listeners.get(header.get("listener"))
        if listener is not None:
            self.close_listener(listener)
        remove = header.get("remove")
        if isinstance(remove, str) and remove not in ("", "/"):
            shutil.rmtree(remove, ignore_errors=True)
        self.send({"op": "ok", "id": req_id})

    def close_listener(self, listener):
        self.listeners.pop(listener.id, None)
        for conn in list(listener.conns.values()):
            self.close_conn(conn, False)
        try:
            self.sel.unregister(listener.sock)
        except (KeyError, ValueError):
            pass
        listener.sock.close()
        try:
            os.unlink(listener.path)
        except OSError:
            pass

    def on_accept(self, listener):
        while True:
            try:
                sock, _ = listener.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                log("accept on %s failed: %s" % (listener.path, err))
                return
            if len(listener.conns) >= RELAY_MAX_CONNECTIONS:
                sock.close()
                continue
            sock.setblocking(False)
            conn = Conn(listener, self.next_conn, sock)
            self.next_conn += 1
            listener.conns[conn.number] = conn
            self.send({"op": "conn", "id": listener.id, "conn": conn.number})
            self.watch_conn(conn)

    def watch_conn(self, conn):
        events = 0
        if not conn.read_eof and conn.unacked < RELAY_WINDOW:
            events |= selectors.EVENT_READ
        if conn.out:
            events |= selectors.EVENT_WRITE
        if events == conn.events:
            return
        if conn.events == 0:
            self.sel.register(conn.sock, events, ("relay", conn))
        elif events == 0:
            self.sel.unregister(conn.sock)
        else:
            self.sel.modify(conn.sock, events, ("relay", conn))
        conn.events = events

    def close_conn(self, conn, tell):
        if conn.listener.conns.pop(conn.number, None) is None:
            return
        if conn.events:
            try:
                self.sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.events = 0
        conn.sock.close()
        if tell:
            self.send({"op": "cclosed", "id": conn.listener.id, "conn": conn.number})

    def on_relay(self, conn, mask):
        if mask & selectors.EVENT_WRITE:
            self.flush_conn(conn)
        if mask & selectors.EVENT_READ and conn.number in conn.listener.conns and conn.unacked < RELAY_WINDOW:
            try:
                data = conn.sock.recv(min(READ_CHUNK, RELAY_WINDOW - conn.unacked))
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                self.close_conn(conn, True)
                return
            if data:
                conn.unacked += len(data)
                self.send({"op": "cdata", "id": conn.listener.id, "conn": conn.number}, data)
            elif data is not None:
                conn.read_eof = True
                self.send({"op": "cend", "id": conn.listener.id, "conn": conn.number})
        if conn.number in conn.listener.conns:
            self.watch_conn(conn)

    def flush_conn(self, conn):
        written = 0
        while conn.out:
            try:
                n = conn.sock.send(bytes(conn.out[:READ_CHUNK]))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.close_conn(conn, True)
                return
            del conn.out[:n]
            written += n
        if written:
            self.send({"op": "cack", "id": conn.listener.id, "conn": conn.number, "bytes": written})
        if not conn.out and conn.shut_wanted:
            conn.shut_wanted = False
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def op_relay(self, op, header, body):
        """The executor's side of a relayed connection; never answered (the connection may be gone already)."""
        listener = self.listeners.get(header.get("id"))
        conn = listener.conns.get(header.get("conn")) if listener is not None else None
        if conn is None:
            return
        if op == "cdata":
            conn.out += body
            if len(conn.out) > RELAY_MAX_QUEUE:
                log("relay connection %d does not read its answers; closing it" % conn.number)
                self.close_conn(conn, True)
                return
            self.flush_conn(conn)
        elif op == "cack":
            conn.unacked = max(0, conn.unacked - max(0, int(header.get("bytes", 0))))
        elif op == "cshut":
            conn.shut_wanted = True
            self.flush_conn(conn)
        elif op == "cclose":
            self.close_conn(conn, False)
            return
        if conn.number in conn.listener.conns:
            self.watch_conn(conn)

    # --- a dropped stream ------------------------------------------------

    def detach(self):
        """The stream is gone (EOF, reset, a failed write): no protocol fault, so the executor may come back.

        Foreground processes end as they always did on a lost stream (their
        callers already got an error); background ones keep running with
        their output left in their pipes (a full pipe blocks the writer, so
        memory stays bounded and nothing is lost) until the executor resumes
        or LINGER_SECONDS pass. Relayed sockets close: their clients were on
        the executor's side of the stream.
        """
        if self.sock is None:
            return
        try:
            self.sel.unregister(self.sock)
        except (KeyError, ValueError):
            pass
        self.sock.close()
        self.sock = None
        self.inbuf = bytearray()
        self.abort_writes()  # their last chunks went with the stream
        if self.redial_path is None and self.linger_path is None:
            self.running = False  # nowhere to be found again: end everything, as before
            return
        if self.detached_until is None:
            # Counted from the first drop: a resume the executor refuses does not extend it.
            log("stream dropped; keeping background processes for %d s" % LINGER_SECONDS)
            self.detached_until = time.monotonic() + LINGER_SECONDS
            self.next_redial = 0.0
        else:
            self.next_redial = time.monotonic() + REDIAL_INTERVAL
        for listener in list(self.listeners.values()):
            self.close_listener(listener)
        now = time.monotonic()
        for proc in list(self.procs.values()):
            proc.kill_replies = []  # their requests went with the stream
            if proc.background and not proc.abandoned:
                self.pause(proc)
            else:
                self.abandon(proc, now)
        if self.transport == "stdio":
            # fd 2 was the pipe to the process that started us; nobody reads it any more.
            try:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 2)
                os.close(null)
            except OSError:
                pass
        if self.linger_path is not None:
            self.open_linger()

    def pause(self, proc):
        proc.paused = True
        for fd in proc.out_fds:
            try:
                self.sel.unregister(fd)
            except (KeyError, ValueError):
                pass

    def unpause(self, proc):
        proc.paused = False
        for fd in proc.out_fds:
            self.sel.register(fd, selectors.EVENT_READ, ("out", proc))
        if proc.is_pty and proc.stdin_queue:
            self.watch_pty(proc, True)
        self.maybe_finish(proc)

    def abandon(self, proc, now):
        """Ends a process nobody waits for any more (SIGTERM, SIGKILL a second later); its exit is not reported."""
        if proc.paused:
            self.unpause(proc)  # its output is read and dropped from now on
        proc.abandoned = True
        if proc.status is not None and not tree_members(proc.pid):
            self.maybe_finish(proc)
            return
        if proc.kill_phase is None:
            signal_tree(proc.pid, signal.SIGTERM)
            proc.kill_phase = "term"
            proc.kill_until = now + 1.0

    def while_detached(self, now):
        if now >= self.detached_until:
            log("nobody resumed within %d s; ending everything" % LINGER_SECONDS)
            self.running = False
            return
        if self.redial_path is not None and now >= self.next_redial:
            self.next_redial = now + REDIAL_INTERVAL
            self.redial()

    def redial(self):
        """Socket mode: dials the executor's listener again and presents resume_key."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(REDIAL_INTERVAL)
            sock.connect(self.redial_path)
            sock.settimeout(None)
            peer = peer_pid(sock)
        except OSError:
            sock.close()
            return
        if peer != self.redial_peer:
            log("%s is served by process %d now, not %d as at first; not resuming there" % (
                self.redial_path, peer, self.redial_peer))
            sock.close()
            return
        self.attach(SocketStream(sock))

    def attach(self, stream):
        self.sock = stream
        self.sel.register(self.sock, selectors.EVENT_READ, ("sock", None))
        # Processes stay paused until the executor says which of them it still tracks (resume).
        self.send_hello(True)

    def open_linger(self):
        """Stdio mode: a private socket where the next `--stdio --resume` start finds this agent."""
        path = self.linger_path
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            os.chmod(os.path.dirname(path), 0o700)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old_umask = os.umask(0o177)
            try:
                sock.bind(path)
            finally:
                os.umask(old_umask)
            sock.listen(1)
            sock.setblocking(False)
        except OSError as err:
            log("cannot listen on %s: %s; ending everything" % (path, err))
            self.running = False
            return
        self.linger_sock = sock
        self.sel.register(sock, selectors.EVENT_READ, ("linger", None))

    def close_linger(self):
        sock, self.linger_sock = self.linger_sock, None
        if sock is None:
            return
        try:
            self.sel.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()
        try:
            os.unlink(self.linger_path)
        except OSError:
            pass

    def on_linger(self):
        """A connection to the linger socket: taken as the new stream once its first frame is auth with resume_key."""
        try:
            conn, _ = self.linger_sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            log("accept on the linger socket failed: %s" % err)
            return
        try:
            conn.settimeout(RESUME_AUTH_SECONDS)
            head = recv_exactly(conn, 8)
            total, head_len = struct.unpack(">II", head)
            if total > MAX_AUTH_FRAME or total < 4 or head_len != total - 4:
                raise ValueError("not an auth frame")
            header = json.loads(recv_exactly(conn, head_len).decode("utf-8"))
            key = header.get("key") if isinstance(header, dict) and header.get("op") == "auth" else None
            if not isinstance(key, str) or not hmac.compare_digest(key.encode("utf-8"), self.resume_key.encode("ascii")):
                raise ValueError("wrong key")
            conn.settimeout(None)
        except (OSError, ValueError) as err:
            log("refused a connection to the linger socket: %s" % err)
            conn.close()
            return
        self.close_linger()
        self.attach(SocketStream(conn))

    def op_resume(self, req_id, header):
        """The executor is back: `procs` are the background processes it still tracks; the rest are ended."""
        wanted = header.get("procs")
        wanted = set(p for p in wanted if isinstance(p, int)) if isinstance(wanted, list) else set()
        self.detached_until = None
        self.close_linger()
        now = time.monotonic()
        alive = []
        for proc in list(self.procs.values()):
            if proc.paused and proc.id in wanted:
                alive.append(proc.id)
            elif proc.paused:
                self.abandon(proc, now)
        # The answer goes first: what the processes wrote meanwhile follows it.
        self.send({"op": "resumed", "id": req_id, "procs": alive})
        for req in alive:
            proc = self.procs.get(req)
            if proc is not None and proc.paused:
                self.unpause(proc)

    # --- shutdown --------------------------------------------------------

    def shutdown(self):
        self.abort_writes()
        for listener in list(self.listeners.values()):
            self.close_listener(listener)
        self.drop_ready()
        procs = list(self.procs.values())
        for proc in procs:
            signal_tree(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and any(tree_members(p.pid) for p in procs):
            time.sleep(0.05)
            self.reap()
        for proc in procs:
            signal_tree(proc.pid, signal.SIGKILL)
        self.close_linger()
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass


def write_target(path):
    """The file a write to `path` lands on: symlinks in its last component are followed, so the temp file and the
    rename happen beside the link's target and the link stays a link. A missing path (or a dangling link's missing
    target) is returned as is."""
    current = path
    for _ in range(MAX_SYMLINK_HOPS + 1):
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return current
        if not stat_module.S_ISLNK(info.st_mode):
            return current
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    raise OSError(errno.ELOOP, "too many levels of symbolic links")


class PendingWrite:
    """One atomic write: a temp file beside the target, renamed over it once complete."""

    def __init__(self, target, existing, fd, temp, mode):
        self.target = target
        self.existing = existing
        self.fd = fd
        self.temp = temp
        self.mode = mode
        self.size = 0

    @staticmethod
    def begin(path):
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        target = write_target(path)
        try:
            existing = os.stat(target)
        except FileNotFoundError:
            existing = None
        if existing is not None:
            if stat_module.S_ISDIR(existing.st_mode):
                raise OSError(errno.EISDIR, "is a directory")
            if not stat_module.S_ISREG(existing.st_mode):
                raise NotRegular(file_kind(existing.st_mode))
            if not os.access(target, os.W_OK):
                raise OSError(errno.EACCES, "permission denied")
        directory, name = os.path.split(target)
        stem = os.fsdecode(os.fsencode(name)[:TEMP_STEM_BYTES])
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        for attempt in range(8):
            suffix = "".join(TEMP_ALPHABET[b % len(TEMP_ALPHABET)] for b in os.urandom(6))
            temp = os.path.join(directory, ".%s.berth-%s" % (stem, suffix))
            try:
                # A new file: what the umask makes of 0666 is its mode; it is written as 0600 meanwhile.
                fd = os.open(temp, flags, 0o600 if existing is not None else 0o666)
                break
            except FileExistsError:
                if attempt == 7:
                    raise
        try:
            if existing is not None:
                mode = stat_module.S_IMODE(existing.st_mode)
            else:
                mode = stat_module.S_IMODE(os.fstat(fd).st_mode)
                os.fchmod(fd, 0o600)
        except BaseException:
            os.close(fd)
            os.unlink(temp)
            raise
        return PendingWrite(target, existing, fd, temp, mode)

    def append(self, data):
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.write(self.fd, view[written:])
        self.size += len(view)

    def commit(self):
        os.fsync(self.fd)
        existing = self.existing
        if existing is not None and (existing.st_uid != os.geteuid() or existing.st_gid != os.getegid()):
            try:
                os.fchown(self.fd, existing.st_uid, existing.st_gid)
            except OSError:
                pass  # only root (or the owner, for its own groups) may: the new file is the writer's
        os.fchmod(self.fd, self.mode)
        fd, self.fd = self.fd, -1
        os.close(fd)
        os.rename(self.temp, self.target)
        self.temp = None

    def abort(self):
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            try:
                os.close(fd)
            except OSError:
                pass
        if self.temp is not None:
            temp, self.temp = self.temp, None
            try:
                os.unlink(temp)
            except OSError:
                pass


class NotRegular(Exception):
    """A path that is not a regular file (nor a directory); `kind` says what it is."""

    def __init__(self, kind):
        Exception.__init__(self, kind)
        self.kind = kind


def file_kind(mode):
    if stat_module.S_ISCHR(mode):
        return "character device"
    if stat_module.S_ISBLK(mode):
        return "block device"
    if stat_module.S_ISFIFO(mode):
        return "FIFO"
    if stat_module.S_ISSOCK(mode):
        return "socket"
    return "special file"


def peer_pid(sock):
    """The pid of the process at the other end of a connected Unix socket (0 when outside our pid namespace)."""
    return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]


def recv_exactly(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ValueError("connection closed")
        data += chunk
    return data


def bridge(stream, path, pid):
    """`--stdio --resume PID`: when the agent that lingers on `path` is process `pid`, carries bytes
    between our stdio and it until either side ends, and returns True; False when there is none.

    The pid is checked (SO_PEERCRED) so that a process of the sandbox that
    bound the path itself is never taken for the agent; the agent in turn
    wants the executor's auth frame (its resume_key) before anything else.
    """
    try:
        sock = connect_linger(path, pid)
        peer = peer_pid(sock)
    except OSError as err:
        log("no agent lingers on %s (%s); starting afresh" % (path, err))
        return False
    if peer != pid:
        log("%s is held by process %d, not the agent %d; starting afresh" % (path, peer, pid))
        sock.close()
        return False
    sock.settimeout(None)
    sel = selectors.DefaultSelector()
    sel.register(stream.in_fd, selectors.EVENT_READ, "in")
    sel.register(sock, selectors.EVENT_READ, "sock")
    done = False
    while not done:
        for key, _ in sel.select():
            try:
                if key.data == "in":
                    data = os.read(stream.in_fd, 1 << 16)
                    if data:
                        sock.sendall(data)
                else:
                    data = sock.recv(1 << 16)
                    if data:
                        stream.sendall(data)
            except OSError:
                data = b""
            if not data:
                done = True
                break
    sock.close()
    stream.close()
    return True


def connect_linger(path, pid):
    """A connection to the linger socket; when there is none yet and process `pid` is an agent with this
    linger path (its stream broke without it seeing an end), tells it so and waits for its socket."""
    deadline = None
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(RESUME_AUTH_SECONDS)
            sock.connect(path)
            sock.settimeout(None)
            return sock
        except OSError as err:
            sock.close()
            if deadline is None:
                if not lingers_on(pid, path):
                    raise
                try:
                    os.kill(pid, signal.SIGUSR1)
                except OSError:
                    raise err
                deadline = time.monotonic() + RESUME_KICK_SECONDS
            elif time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def lingers_on(pid, path):
    """Whether process `pid`'s command line has `--linger PATH` (so a signal reaches an agent, not a reused pid)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            args = f.read(1 << 16).split(b"\0")
    except OSError:
        return False
    want = path.encode("utf-8", "surrogateescape")
    return any(args[i] == b"--linger" and args[i + 1] == want for i in range(len(args) - 1))


def take_token(path):
    """The token from its file, which is removed at once: nothing started later can find it."""
    try:
        with open(path, "r") as f:
            token = f.read().strip()
    finally:
        try:
            os.unlink(path)
        except OSError as err:
            if err.errno != errno.ENOENT:
                log("cannot remove %s: %s" % (path, err))
    return token


def make_undumpable():
    """Commands run as our user; without this they could ptrace us or read our memory. Best effort."""
    try:
        import ctypes
        pr_set_dumpable = 4
        if ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
            log("prctl(PR_SET_DUMPABLE) failed: errno %d" % ctypes.get_errno())
    except Exception as err:
        log("cannot make the agent non-dumpable: %s" % err)


def survive_parent():
    """Stdio mode: the process that started us may be killed once our stream drops; we stay (best effort)."""
    try:
        import ctypes
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, 0, 0, 0, 0)
    except Exception as err:
        log("cannot clear the parent-death signal: %s" % err)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def become_subreaper():
    """Orphans of commands become ours, and reap() collects them, as it does as PID 1 in a container.

    In stdio mode the agent is no container's PID 1 (under docker exec, ssh,
    apptainer), and a host's init may leave them as zombies for a while.
    Best effort.
    """
    try:
        import ctypes
        pr_set_child_subreaper = 36
        if ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0) != 0:
            log("prctl(PR_SET_CHILD_SUBREAPER) failed: errno %d" % ctypes.get_errno())
    except Exception as err:
        log("cannot become a subreaper: %s" % err)


def connect(path, timeout):
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError as err:
            sock.close()
            if time.monotonic() >= deadline:
                raise OSError(err.errno, "cannot connect to %s: %s" % (path, err.strerror))
            time.sleep(0.05)


def main():
    if sys.version_info[:2] < MIN_PYTHON:
        # The executor matches this line to tell "python too old" from other failures.
        log("python %d.%d or newer required, this is %d.%d" % (MIN_PYTHON + tuple(sys.version_info[:2])))
        return 4
    make_undumpable()
    if sys.argv[1:2] == ["--stdio"]:
        options = parse_stdio_options(sys.argv[2:])
        if options is None:
            log("usage: berth_agent.py --stdio [--linger PATH [--resume PID]]")
            return 2
        linger_path, resume_pid = options
        stream = take_stdio()
        if resume_pid is not None and bridge(stream, linger_path, resume_pid):
            return 0
        if linger_path is not None:
            survive_parent()
        become_subreaper()
        Agent(stream, "", linger_path=linger_path).run()
        return 0
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BERTH_AGENT_SOCKET", "/run/berth/agent.sock")
    token_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(path), "agent-token")
    try:
        token = take_token(token_path)
    except OSError as err:
        log("cannot read the agent token: %s" % err)
        return 3
    try:
        sock = connect(path, 30.0)
    except OSError as err:
        log(str(err))
        return 1
    try:
        first_peer = peer_pid(sock)
    except OSError as err:
        log("cannot tell who listens on %s (%s); a dropped stream will not be resumed" % (path, err))
        first_peer = None
    Agent(SocketStream(sock), token, redial_path=path if first_peer is not None else None, redial_peer=first_peer).run()
    return 0


def parse_stdio_options(args):
    """(linger path or None, resume pid or None) from what follows --stdio; None when malformed."""
    linger_path = resume_pid = None
    while args:
        if args[0] == "--linger" and len(args) > 1 and os.path.isabs(args[1]):
            linger_path = args[1]
        elif args[0] == "--resume" and len(args) > 1 and args[1].isdigit():
            resume_pid = int(args[1])
        else:
            return None
        args = args[2:]
    if resume_pid is not None and linger_path is None:
        return None
    return linger_path, resume_pid


if __name__ == "__main__":
    sys.exit(main())
