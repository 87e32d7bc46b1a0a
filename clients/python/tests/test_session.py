"""The Session stream as an iterator: streamed output, approvals answered both ways, interrupt."""
import os
import shutil
import threading
import unittest

from berth_client import ApprovalRequest, Berth, Output, Result

from . import support


class SessionTest(unittest.TestCase):
    def setUp(self):
        self.berth = Berth(support.server())
        self.addCleanup(self.berth.close)
        self.task = self.berth.task(support.task_id("py-session"), session_id="py-sess")
        self.addCleanup(self.task.end)
        self.dir = support.scratch_dir()
        self.addCleanup(shutil.rmtree, self.dir, True)

    def marking(self, name):
        """A command that needs approval (bash -c) and leaves a marker file when it runs."""
        marker = os.path.join(self.dir, name)
        return f"bash -c 'echo ran > {marker}; echo ran-{name}'", marker

    def test_output_streams_before_the_result(self):
        events = list(self.task.session().run("terminal", {"command": "echo one; sleep 0.2; echo two"}))
        self.assertIsInstance(events[-1], Result)
        self.assertTrue(all(isinstance(e, Output) for e in events[:-1]), events)
        streamed = "".join(e.text for e in events[:-1])
        self.assertIn("one", streamed)
        self.assertIn("two", streamed)
        self.assertEqual(events[-1].result, {"output": "one\ntwo", "exit_code": 0, "error": None})

    def test_approval_once_runs_the_command(self):
        command, marker = self.marking("once")
        asked = []
        result = None
        for ev in self.task.session().run("terminal", {"command": command}):
            if ev.kind == "approval":
                asked.append(ev)
                self.assertFalse(os.path.exists(marker), "ran before it was approved")
                ev.answer("once")
            elif ev.kind == "result":
                result = ev.result
        self.assertEqual(len(asked), 1)
        self.assertIsInstance(asked[0], ApprovalRequest)
        self.assertEqual(asked[0].command, command)
        self.assertEqual(asked[0].pattern_key, "shell command via -c/-lc flag")
        self.assertEqual(asked[0].choices, ("once", "session", "always", "deny"))
        self.assertEqual(result["output"], "ran-once")
        self.assertIn("approved by the user", result["approval"])
        self.assertTrue(os.path.exists(marker))

    def test_approval_deny_blocks_the_command(self):
        command, marker = self.marking("deny")
        result = None
        for ev in self.task.session().run("terminal", {"command": command}):
            if ev.kind == "approval":
                ev.answer("deny")
            elif ev.kind == "result":
                result = ev.result
        self.assertEqual(result["status"], "blocked")
        self.assertTrue(result["error"].startswith("BLOCKED: User denied this command. The user has NOT consented"), result)
        self.assertFalse(os.path.exists(marker))

    def test_call_answers_through_a_callback_and_denies_without_one(self):
        session = self.task.session()
        command, marker = self.marking("callback")
        seen = []
        r = session.call("terminal", {"command": command}, on_approval=lambda req: seen.append(req.pattern_key) or "once")
        self.assertEqual(r["output"], "ran-callback")
        self.assertEqual(seen, ["shell command via -c/-lc flag"])
        command, marker = self.marking("no-callback")
        r = session.call("terminal", {"command": command})
        self.assertEqual(r["status"], "blocked")
        self.assertFalse(os.path.exists(marker))

    def test_an_answer_outside_the_choices_is_refused_locally(self):
        command, marker = self.marking("bad-choice")
        for ev in self.task.session().run("terminal", {"command": command}):
            if ev.kind == "approval":
                with self.assertRaises(ValueError):
                    ev.answer("yes please")
                ev.answer("deny")
        self.assertFalse(os.path.exists(marker))

    def test_interrupt_on_the_stream(self):
        session = self.task.session()
        result = None
        for ev in session.run("terminal", {"command": "echo started; sleep 60"}):
            if ev.kind == "output" and "started" in ev.text:
                session.interrupt()
            elif ev.kind == "result":
                result = ev.result
        self.assertEqual(result["exit_code"], 130)
        self.assertIn("[Command interrupted]", result["output"])

    def test_one_stream_carries_calls_from_the_same_task_in_order(self):
        session = self.task.session()
        session.call("terminal", {"command": f"cd {self.dir}"})
        self.assertIs(self.task.session(), session)
        self.assertEqual(session.call("terminal", {"command": "pwd"})["output"], self.dir)
        session.close()
        self.assertFalse(session.open)
        self.assertIsNot(self.task.session(), session)

    def test_threads_share_one_stream_and_each_gets_its_own_result(self):
        session = self.task.session()
        results = {}

        def run(n):
            results[n] = session.call("terminal", {"command": f"sleep 0.2; echo thread-{n}"})["output"]

        threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(results, {n: f"thread-{n}" for n in range(4)})


if __name__ == "__main__":
    unittest.main()
