"""The agent: its stream, the main loop and the dispatch of requests to the parts that serve them."""

import errno
import os
import selectors
import signal
import sys
import time

from .counters import find_counters
from .files import Files
from .prestart import PreStart
from .processes import OUTPUT_BURST, Processes
from .proctree import signal_tree, tree_members
from .protocol import CAPABILITIES, MAX_ERROR_MESSAGE, MAX_SEND_FRAME, VERSION, BadFrame, encode_frame, errno_name, log, take_frame
from .relay import Relay
from .resume import REDIAL_INTERVAL, Resume
from .taskuser import _NoSwitch
from .terminal import Terminal


class Agent(Processes, PreStart, Terminal, Files, Relay, Resume):
    """One agent: its stream, its commands, file writes in progress, relayed sockets."""

    def __init__(self, sock, token, redial_path=None, linger_path=None, redial_peer=None, user=None):
        # `sock`: a SocketStream or StdioStream (anything with fileno, recv, sendall, close);
        # None while the stream is down (see detach()).
        self.sock = sock
        # A TaskUser when commands run as the task's user (see become_task_user()), else None.
        self.user = user
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

    def as_root(self):
        """uid 0 for a spawn or a dial (see TaskUser); a no-op without --user."""
        return self.user.root() if self.user is not None else _NoSwitch()

    def child_ids(self, cwd):
        """Popen arguments that start a child in `cwd` as the task's user (or as we are).

        With --user the directory is entered here, as the task's user, and
        inherited: Popen would enter it before dropping to the task's ids,
        as root, which may not enter a directory the task made private."""
        if self.user is None:
            return {"cwd": cwd}
        os.chdir(cwd)
        return self.user.popen_ids()

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
        while True:
            try:
                frame = take_frame(self.inbuf)
            except BadFrame as err:
                log("%s; closing" % err)
                self.running = False
                return
            if frame is None:
                break
            self.dispatch(*frame)
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
