"""Commands under a pseudo-terminal: the terminal itself and the fork/exec that makes it the command's
controlling one."""

import errno
import fcntl
import os
import pty
import signal
import struct
import termios

from .protocol import errno_name

PTY_ROWS, PTY_COLS = 50, 200


def open_terminal():
    """A new PTY (master, slave) with the window size commands see."""
    master, slave = pty.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", PTY_ROWS, PTY_COLS, 0, 0))
    except BaseException:
        os.close(master)
        os.close(slave)
        raise
    return master, slave


class Terminal(object):
    """Starting a command on a terminal (mixed into Agent)."""

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
                if self.user is not None:
                    self.user.become()  # before the directory: entered as the task's user
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
