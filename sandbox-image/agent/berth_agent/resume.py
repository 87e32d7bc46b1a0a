"""A dropped stream: lingering with background processes, being found again (redial, linger socket,
the `--resume` bridge), and the resume that picks up where the stream broke."""

import hmac
import json
import os
import selectors
import signal
import socket
import struct
import time

from .proctree import signal_tree, tree_members
from .protocol import log
from .streams import SocketStream

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


class Resume(object):
    """The agent without its stream, and back (mixed into Agent)."""

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
            with self.as_root():  # the socket is the container root's alone
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
