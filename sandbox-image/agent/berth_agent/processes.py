"""Commands: spawning `bash -c` (into a pre-started shell when one fits), their stdin and output, exits,
kills, and the cgroup counters reported with every exit."""

import errno
import os
import selectors
import signal
import subprocess
import time

from .protocol import READ_CHUNK, log
from .terminal import open_terminal

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


# Counters reported with every exit, so the executor can tell that a limit
# of the container (memory, pids) hit the command: name -> (files, line key).
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


class Processes(object):
    """The agent's commands (mixed into Agent)."""

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
            master, slave = open_terminal()
            try:
                with self.as_root():
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
                # subprocess uses vfork here (fork when it must switch ids): several times
                # faster than os.fork from Python, and this is every command's path.
                ids = self.child_ids(cwd)
                with self.as_root():
                    popen = subprocess.Popen(argv, stdin=in_r, stdout=out_w, stderr=err_w, env=env,
                                             start_new_session=True, close_fds=True, restore_signals=True, **ids)
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
            ids = self.child_ids(cwd)
            with self.as_root():
                popen = subprocess.Popen(["bash", "-c", ". /dev/fd/%d" % script_r, "bash"], stdin=in_r,
                                         stdout=out_w, stderr=err_w, env=self.base_env, start_new_session=True,
                                         close_fds=True, pass_fds=(script_r,), restore_signals=True, **ids)
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
