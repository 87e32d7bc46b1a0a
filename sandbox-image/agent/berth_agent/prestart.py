"""Pre-started shells: the next command's `bash` is started ahead of it and reads its script from a
pipe, so a command does not wait for bash to start (mixed into Agent)."""

import os
import signal
import subprocess

from .proc import Proc
from .proctree import signal_tree
from .protocol import log

# Scripts up to this size go to a pre-started shell: what an empty pipe takes without waiting.
SCRIPT_PIPE_BYTES = 60 * 1024


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


class PreStart(object):
    """The pre-started shell of the agent (`self.ready`)."""

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
