"""One spawned command: its pid, its output pipes (or PTY master), its stdin queue and where it is in
its life (running, being killed, reaped, reported)."""

import errno
import os

from .protocol import READ_CHUNK


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
