"""Commands: spawn, their output and exits, stdin, kills of the whole process tree, pre-started shells; and
the helpers that find a command's processes and read the container's counters."""
import os
import re
import signal
import subprocess
import time
import unittest

from berth_agent.counters import read_counter
from berth_agent.proctree import signal_tree, tree_members
from berth_agent.protocol import READ_CHUNK

from .agent_process import AgentProcess, process_group, process_state
from .support import TempDir


class Spawn(unittest.TestCase):
    def setUp(self):
        self.agent = AgentProcess(self)

    def test_output_and_the_exit_code_arrive_and_the_exit_comes_last(self):
        output, exit_header = self.agent.run(1, "echo out; echo err >&2; exit 3")
        self.assertEqual(sorted(output.splitlines()), [b"err", b"out"])
        self.assertEqual((exit_header["code"], exit_header["signal"]), (3, None))
        self.assertIsInstance(exit_header["counters"], dict)

    def test_a_command_killed_by_a_signal_reports_the_signal_and_no_code(self):
        _, exit_header = self.agent.run(1, "kill -KILL $$")
        self.assertEqual((exit_header["code"], exit_header["signal"]), (None, signal.SIGKILL))

    def test_a_large_output_arrives_whole_in_order_in_bounded_frames(self):
        self.agent.spawn(1, "seq 1 100000")
        bodies, exit_header = self.agent.finish(1)
        self.assertEqual(b"".join(bodies), b"".join(b"%d\n" % i for i in range(1, 100001)))
        self.assertLessEqual(max(len(b) for b in bodies), READ_CHUNK)
        self.assertEqual(exit_header["code"], 0)

    def test_the_command_runs_in_its_directory_with_its_environment_and_not_the_agents_secrets(self):
        tmp = TempDir(self)
        agent = AgentProcess(self, env=dict(os.environ, BERTH_AGENT_TOKEN="secret", BERTH_AGENT_SOCKET="/run/x"))
        output, _ = agent.run(1, 'pwd; echo "$GREETING"; echo "${BERTH_AGENT_TOKEN-unset} ${BERTH_AGENT_SOCKET-unset}"',
                              cwd=tmp.path, env={"GREETING": "hello"})
        self.assertEqual(output, ("%s\nhello\nunset unset\n" % os.path.realpath(tmp.path)).encode())

    def test_a_directory_that_is_not_there_starts_the_command_in_the_root(self):
        output, _ = self.agent.run(1, "pwd", cwd="/nonexistent/berth-test")
        self.assertEqual(output, b"/\n")

    def test_a_request_id_in_use_is_refused(self):
        self.agent.spawn(1, "sleep 30")
        self.assertEqual(self.agent.request({"op": "spawn", "id": 1, "script": "true"})["errno"], "EEXIST")
        self.assertEqual(self.agent.request({"op": "kill", "id": 2, "proc": 1, "grace_ms": 0})["op"], "ok")

    def test_every_command_gets_only_stdin_stdout_and_stderr(self):
        # The first command starts bash itself; the second, in the same directory, takes the shell started ahead
        # of it, whose script came through one more descriptor: neither may keep any other.
        tmp = TempDir(self)
        for req_id in (1, 2, 3):
            # A builtin waits for stdin: bash itself, not a program it became that is still loading.
            pid = self.agent.spawn(req_id, "echo $$; read -r line; exit 0", cwd=tmp.path, keep_stdin=True)
            self.assertEqual(int(self.agent.read_until(req_id, b"\n")), pid)
            self.assertEqual(sorted(os.listdir("/proc/%d/fd" % pid)), ["0", "1", "2"], "command %d" % req_id)
            self.agent.request({"op": "eof", "id": 10 + req_id, "proc": req_id})
            self.assertEqual(self.agent.finish(req_id)[1]["code"], 0)

    def test_a_script_too_long_for_a_shell_started_ahead_still_runs_whole(self):
        self.agent.run(1, "true")
        long_script = ": '%s'\necho end-of-a-long-script" % ("x" * (100 * 1024))
        output, exit_header = self.agent.run(2, long_script)
        self.assertEqual((output, exit_header["code"]), (b"end-of-a-long-script\n", 0))


class Stdin(unittest.TestCase):
    def setUp(self):
        self.agent = AgentProcess(self)

    def test_the_body_of_a_spawn_is_the_whole_stdin(self):
        output, exit_header = self.agent.run(1, "cat; echo after-eof", body=b"first bytes\n")
        self.assertEqual((output, exit_header["code"]), (b"first bytes\nafter-eof\n", 0))

    def test_stdin_kept_open_takes_more_bytes_until_eof(self):
        self.agent.spawn(1, "cat; echo after-eof", body=b"one ", keep_stdin=True)
        self.assertEqual(self.agent.request({"op": "stdin", "id": 2, "proc": 1}, b"two\n")["op"], "ok")
        self.assertEqual(self.agent.read_until(1, b"two\n"), b"one two\n")
        self.assertEqual(self.agent.request({"op": "eof", "id": 3, "proc": 1})["op"], "ok")
        bodies, exit_header = self.agent.finish(1)
        self.assertEqual((b"".join(bodies), exit_header["code"]), (b"after-eof\n", 0))

    def test_stdin_after_eof_or_after_the_exit_is_refused(self):
        self.agent.spawn(1, "cat >/dev/null; echo stdin-ended; sleep 30", keep_stdin=True)
        self.assertEqual(self.agent.request({"op": "eof", "id": 2, "proc": 1})["op"], "ok")
        self.agent.read_until(1, b"stdin-ended\n")
        refused = self.agent.request({"op": "stdin", "id": 3, "proc": 1}, b"late")
        self.assertEqual((refused["op"], refused["errno"], refused["message"]), ("error", "EPIPE", "stdin is closed"))
        self.agent.request({"op": "kill", "id": 4, "proc": 1, "grace_ms": 0})
        self.agent.finish(1)
        gone = self.agent.request({"op": "stdin", "id": 5, "proc": 1}, b"later")
        self.assertEqual((gone["errno"], gone["message"]), ("ESRCH", "the process has exited"))


class Kill(unittest.TestCase):
    def setUp(self):
        self.agent = AgentProcess(self)

    def test_a_kill_ends_the_command_and_every_process_it_started_even_in_another_group(self):
        # `set -m`: the second sleep gets a process group of its own, in the command's session.
        pid = self.agent.spawn(1, "sleep 30 & echo $!; set -m; sleep 30 & echo $!; wait")
        output = b""
        while len(re.findall(rb"^\d+$", output, re.M)) < 2:
            output += self.agent.read_until(1, b"\n")
        children = [int(p) for p in re.findall(rb"^\d+$", output, re.M)]
        self.assertEqual(process_group(children[0]), pid)
        self.assertNotEqual(process_group(children[1]), pid)
        self.assertEqual(self.agent.request({"op": "kill", "id": 2, "proc": 1, "grace_ms": 5000})["op"], "ok")
        _, exit_header = self.agent.finish(1)
        self.assertEqual(exit_header["signal"], signal.SIGTERM)
        for child in children:
            self.assertIn(process_state(child), (None, "Z"), "process %d outlived the kill" % child)

    def test_what_ignores_sigterm_gets_sigkill_after_the_grace_period(self):
        self.agent.spawn(1, "trap '' TERM; sleep 30 & echo $!; wait")
        child = int(self.agent.read_until(1, b"\n"))
        started = time.monotonic()
        self.assertEqual(self.agent.request({"op": "kill", "id": 2, "proc": 1, "grace_ms": 300})["op"], "ok")
        self.assertGreaterEqual(time.monotonic() - started, 0.3)
        _, exit_header = self.agent.finish(1)
        self.assertEqual(exit_header["signal"], signal.SIGKILL)
        self.assertIn(process_state(child), (None, "Z"))

    def test_killing_a_process_whose_exit_was_reported_is_answered_ok(self):
        self.agent.run(1, "true")
        self.assertEqual(self.agent.request({"op": "kill", "id": 2, "proc": 1, "grace_ms": 0})["op"], "ok")


class ProcessTree(unittest.TestCase):
    def start(self, script):
        child = subprocess.Popen(["bash", "-c", script], start_new_session=True, stdout=subprocess.PIPE)
        self.addCleanup(child.stdout.close)
        self.addCleanup(lambda: child.poll() is not None or (child.kill(), child.wait()))
        # Its whole session, while it is not reaped (its pid cannot name another process then).
        self.addCleanup(lambda: child.poll() is not None or signal_tree(child.pid, signal.SIGKILL))
        return child

    def test_the_members_of_a_session_are_found_and_signalled(self):
        child = self.start("set -m; sleep 30 & echo $!; wait")
        grandchild = int(child.stdout.readline())
        self.assertEqual(sorted(tree_members(child.pid)), sorted([child.pid, grandchild]))
        self.assertTrue(signal_tree(child.pid, signal.SIGKILL))
        child.wait()
        deadline = time.monotonic() + 5
        while process_state(grandchild) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertIn(process_state(grandchild), (None, "Z"))
        self.assertEqual(tree_members(child.pid), [])

    def test_signalling_a_tree_that_is_gone_says_so(self):
        child = self.start("exit 0")
        child.wait()
        self.assertFalse(signal_tree(child.pid, signal.SIGTERM))


class Counters(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir(self)

    def counter_file(self, text):
        path = self.tmp.join("events")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_a_counter_is_read_from_its_line(self):
        self.assertEqual(read_counter(self.counter_file("low 0\noom 1\noom_kill 4\n"), "oom_kill"), 4)
        self.assertEqual(read_counter(self.counter_file("max 12\n"), "max"), 12)

    def test_a_missing_file_line_or_number_reads_as_none(self):
        self.assertIsNone(read_counter(self.tmp.join("absent"), "oom_kill"))
        self.assertIsNone(read_counter(self.counter_file("oom 1\n"), "oom_kill"))
        self.assertIsNone(read_counter(self.counter_file("oom_kill many\n"), "oom_kill"))
        self.assertIsNone(read_counter(self.counter_file("oom_kill 1 2\n"), "oom_kill"))


if __name__ == "__main__":
    unittest.main()
