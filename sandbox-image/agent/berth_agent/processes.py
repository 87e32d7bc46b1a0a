"""Commands: spawning `bash -c` (into a pre-started shell when one fits, prestart.py), their stdin and
output, exits and kills."""

import errno
import os
import selectors
import signal
import subprocess
import time

from .counters import read_counter
from .prestart import Ready
from .proc import Proc
from .proctree import signal_tree
from .protocol import READ_CHUNK
from .terminal import open_terminal


# After a kill, how long to wait for output pipes that a process outside the
# group still holds before closing them ourselves.
DRAIN_AFTER_KILL = 1.0


# Output the agent forwards to the executor, all processes of the task
# together: a burst, then a sustained rate. Past them the agent reads more
# slowly and a flooding process blocks on its full pipe, so a flood costs the
# executor (shared by every tenant) at most this rate, and loses nothing.
OUTPUT_BURST = 16 * 1024 * 1024
OUTPUT_RATE = 4 * 1024 * 1024


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
