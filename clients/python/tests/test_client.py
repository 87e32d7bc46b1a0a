"""The task-centred API over unary calls: terminal, files, errors as results, interrupt, end."""
import os
import shutil
import socket
import threading
import time
import unittest

from berth_client import Berth, UnavailableError

from . import support


class TaskTest(unittest.TestCase):
    def setUp(self):
        self.berth = Berth(support.server())
        self.addCleanup(self.berth.close)
        self.task = self.berth.task(support.task_id("py-client"))
        self.addCleanup(self.task.end)
        self.dir = support.scratch_dir()
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_terminal_keeps_cwd_and_env_between_calls(self):
        first = self.task.terminal(f"cd {self.dir} && export GREETING=hi")
        self.assertEqual(first["exit_code"], 0, first)
        second = self.task.terminal("pwd; echo $GREETING")
        self.assertEqual(second["output"], f"{self.dir}\nhi")
        self.assertEqual(second["exit_code"], 0)
        self.assertIsNone(second["error"])

    def test_non_zero_exit_is_a_result(self):
        r = self.task.terminal("echo out; echo err >&2; exit 3")
        self.assertEqual(r["exit_code"], 3)
        self.assertEqual(r["output"], "out\nerr")

    def test_files_round_trip(self):
        path = os.path.join(self.dir, "sub", "notes.txt")
        w = self.task.write_file(path, "alpha\nbeta\n")
        self.assertNotIn("error", w)
        with open(path, encoding="utf-8") as f:
            self.assertEqual(f.read(), "alpha\nbeta\n")
        r = self.task.read_file(path)
        self.assertEqual(r["total_lines"], 2)
        self.assertIn("2|beta", r["content"])
        p = self.task.patch(path, old_string="beta", new_string="gamma")
        self.assertNotIn("error", p)
        found = self.task.search_files("gam+a", path=self.dir)
        self.assertEqual([m["line"] for m in found["matches"]], [2], found)
        names = self.task.search_files("*.txt", target="files", path=self.dir)
        self.assertTrue(any(str(f).endswith("notes.txt") for f in names.get("files", [])), names)

    def test_tool_failures_are_results_not_exceptions(self):
        self.assertEqual(self.task.call("no_such_tool", {}), {"error": "Unknown tool: no_such_tool"})
        missing = self.task.read_file(os.path.join(self.dir, "absent.txt"))
        self.assertIn("error", missing)
        blocked = self.task.terminal("pwd", workdir="/tmp;rm")
        self.assertEqual(blocked["status"], "blocked")
        self.assertIn("disallowed character ';'", blocked["error"])

    def test_list_tools_follows_toolsets(self):
        names = sorted(t["function"]["name"] for t in self.berth.list_tools(toolsets=["file"]))
        self.assertEqual(names, ["patch", "read_file", "search_files", "write_file"])
        everything = {t["function"]["name"] for t in self.berth.list_tools()}
        self.assertTrue({"terminal", "process_manage", "execute_code"} <= everything, everything)
        # Listings advertise only the current names; the old one still works when called (below).
        self.assertNotIn("process", everything)

    def test_background_process_through_process_tool(self):
        started = self.task.terminal("echo from-bg; sleep 0.2; echo done-bg", background=True)
        self.assertTrue(started["session_id"].startswith("proc_"), started)
        waited = self.task.process_manage("wait", started["session_id"], timeout=30)
        self.assertIn("done-bg", waited.get("output", ""), waited)
        # The deprecated method sends the old name, which the server maps to process_manage.
        logged = self.task.process("log", started["session_id"])
        self.assertIn("from-bg", logged.get("output", ""), logged)

    def test_background_notify_heartbeat_and_the_foreground_refusal(self):
        started = self.task.terminal("wc -l", background=True, notify=True, heartbeat=5, persist_on_release=True)
        self.assertEqual(
            [started.get("persist_on_release"), started.get("notify_on_complete"), started.get("heartbeat_seconds")],
            [True, True, 60], started,
        )
        # Without a PTY stdin is at end of input: wc reads nothing and exits at once.
        waited = self.task.process_manage("wait", started["session_id"], timeout=30)
        self.assertEqual([waited.get("status"), waited.get("output")], ["exited", "0\n"], waited)
        refused = self.task.terminal("make", notify=["ready"])
        self.assertTrue(refused.get("error", "").startswith("notify/heartbeat only apply to background commands"), refused)

    def test_interrupt_stops_the_running_command(self):
        results = {}
        worker = threading.Thread(target=lambda: results.setdefault("r", self.task.terminal("sleep 60")))
        worker.start()
        interrupted = 0
        # The call may not have reached the executor yet: ask until it has.
        for _ in range(600):
            interrupted = self.task.interrupt()
            if interrupted:
                break
            time.sleep(0.05)
        worker.join(30)
        self.assertEqual(interrupted, 1)
        self.assertFalse(worker.is_alive())
        self.assertEqual(results["r"]["exit_code"], 130)
        self.assertIn("[Command interrupted]", results["r"]["output"])

    def test_execute_code_runs_a_script_with_tools(self):
        r = self.task.execute_code("from hermes_tools import terminal\nprint(terminal('echo $((6*7))')['output'])")
        self.assertEqual(r["status"], "success", r)
        self.assertEqual(r["output"].strip(), "42")
        self.assertEqual(r["tool_calls_made"], 1)

    def test_end_releases_the_environment(self):
        self.task.terminal(f"cd {self.dir} && export KEPT=yes")
        self.assertTrue(self.task.end())
        fresh = self.task.terminal("pwd; echo ${KEPT:-gone}")
        self.assertNotIn(self.dir, fresh["output"])
        self.assertTrue(fresh["output"].endswith("gone"), fresh)
        self.assertFalse(self.berth.task(support.task_id("never-used")).end())


class ConnectionTest(unittest.TestCase):
    def test_unreachable_server_raises_unavailable(self):
        # A port this test held and let go: nothing listens there.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with Berth(f"127.0.0.1:{port}", timeout=20) as b:
            with self.assertRaises(UnavailableError) as caught:
                b.task("t").terminal("true")
        self.assertIsInstance(caught.exception, ConnectionError)
        self.assertEqual(caught.exception.code.name, "UNAVAILABLE")


if __name__ == "__main__":
    unittest.main()
