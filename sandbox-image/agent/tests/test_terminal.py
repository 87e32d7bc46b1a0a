"""Commands under a pseudo-terminal: the terminal the agent opens, the fork/exec that makes it the command's
controlling terminal, and what a spawn with `pty` does with stdin and the last output."""
import errno
import fcntl
import os
import signal
import struct
import termios
import unittest

from berth_agent.terminal import PTY_COLS, PTY_ROWS, Terminal, open_terminal

from .agent_process import AgentProcess


class Starter(Terminal):
    """fork_exec without the rest of an agent: no task user."""

    user = None


def read_to_end(master):
    """What the terminal shows until its last writer closes it (EIO on Linux)."""
    out = b""
    while True:
        try:
            data = os.read(master, 4096)
        except OSError as err:
            if err.errno != errno.EIO:
                raise
            return out
        if not data:
            return out
        out += data


PYTHON_IGNORES = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))


def ignored_signals(pid):
    """The SigIgn mask of /proc/PID/status."""
    with open("/proc/%d/status" % pid) as f:
        return int([line for line in f if line.startswith("SigIgn:")][0].split()[1], 16)


def reap(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class OpenTerminal(unittest.TestCase):
    def test_a_terminal_with_the_window_size_commands_see(self):
        master, slave = open_terminal()
        self.addCleanup(os.close, master)
        self.addCleanup(os.close, slave)
        self.assertTrue(os.isatty(slave))
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8))
        self.assertEqual((rows, cols), (PTY_ROWS, PTY_COLS))


class ForkExec(unittest.TestCase):
    def test_the_command_leads_a_session_whose_controlling_terminal_is_the_pty(self):
        master, slave = open_terminal()
        self.addCleanup(os.close, master)
        script = 'echo "sid=$(cut -d" " -f6 /proc/$$/stat) pid=$$"; tty; stty size; : </dev/tty && echo has-ctty'
        try:
            pid = Starter().fork_exec(["bash", "-c", script], dict(os.environ), "/", slave, slave, slave, ctty=slave)
        finally:
            os.close(slave)
        lines = read_to_end(master).decode().split("\r\n")
        self.assertEqual(reap(pid), 0)
        self.assertEqual(lines[0], "sid=%d pid=%d" % (pid, pid))
        self.assertRegex(lines[1], r"^/dev/pts/\d+$")
        self.assertEqual(lines[2:4], ["%d %d" % (PTY_ROWS, PTY_COLS), "has-ctty"])

    def test_signals_python_ignores_are_the_defaults_again_in_the_command(self):
        # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec: `yes | head` would
        # never end.
        self.assertEqual(ignored_signals(os.getpid()) & PYTHON_IGNORES, PYTHON_IGNORES)
        master, slave = open_terminal()
        self.addCleanup(os.close, master)
        try:
            pid = Starter().fork_exec(["bash", "-c", "grep SigIgn /proc/$$/status"], dict(os.environ), "/", slave, slave,
                                      slave, ctty=slave)
        finally:
            os.close(slave)
        output = read_to_end(master).decode()
        self.assertEqual(reap(pid), 0)
        self.assertEqual(int(output.split()[1], 16) & PYTHON_IGNORES, 0, output)

    def test_a_program_that_cannot_start_is_an_oserror_with_its_errno(self):
        null = os.open(os.devnull, os.O_RDWR)
        self.addCleanup(os.close, null)
        with self.assertRaises(OSError) as caught:
            Starter().fork_exec(["/nonexistent/berth-program"], {}, "/", null, null, null)
        self.assertEqual((caught.exception.errno, caught.exception.strerror),
                         (errno.ENOENT, "cannot start bash: No such file or directory"))
        with self.assertRaises(OSError) as caught:
            Starter().fork_exec(["true"], dict(os.environ), "/nonexistent/berth-dir", null, null, null)
        self.assertEqual(caught.exception.errno, errno.ENOENT)


class PtySpawn(unittest.TestCase):
    def setUp(self):
        self.agent = AgentProcess(self)

    def test_a_pty_command_sees_a_terminal_of_the_agents_size(self):
        output, exit_header = self.agent.run(1, "tty; stty size; : </dev/tty && echo has-ctty", pty=True)
        lines = output.decode().split("\r\n")
        self.assertRegex(lines[0], r"^/dev/pts/\d+$")
        self.assertEqual(lines[1:], ["%d %d" % (PTY_ROWS, PTY_COLS), "has-ctty", ""])
        self.assertEqual(exit_header["code"], 0)

    def test_stdin_goes_through_the_terminal_and_eof_ends_a_partial_line(self):
        self.agent.spawn(1, 'read line; echo "got $line"; cat; echo "[eof]"', pty=True, keep_stdin=True)
        self.agent.request({"op": "stdin", "id": 2, "proc": 1}, b"hello\n")
        self.agent.read_until(1, b"got hello\r\n")
        self.agent.request({"op": "stdin", "id": 3, "proc": 1}, b"partial")
        self.agent.request({"op": "eof", "id": 4, "proc": 1})
        bodies, exit_header = self.agent.finish(1)
        self.assertEqual(exit_header["code"], 0)
        # The terminal echoes what was typed; cat passes the partial line on at the first ^D, ends at the second.
        self.assertTrue(b"".join(bodies).endswith(b"partialpartial[eof]\r\n"), b"".join(bodies))

    def test_what_a_command_writes_last_before_it_exits_is_not_lost(self):
        for req_id in range(1, 6):
            output, exit_header = self.agent.run(req_id, "printf 'last words without a newline'; exit 7", pty=True)
            self.assertEqual((output, exit_header["code"]), (b"last words without a newline", 7))


if __name__ == "__main__":
    unittest.main()
