"""Background-process events: the per-task stream as a generator (with
reconnection after the last id seen) and the Session's events."""
import time
import unittest

from berth_client import BackgroundEvent, Berth

from . import support


def wait_exited(task, session_id):
    while task.process_manage(action="poll", session_id=session_id)["status"] != "exited":
        time.sleep(0.2)


class EventsTest(unittest.TestCase):
    def setUp(self):
        self.berth = Berth(support.server())
        self.addCleanup(self.berth.close)
        self.task = self.berth.task(support.task_id("py-events"))
        self.addCleanup(self.task.end)

    def start(self, command):
        r = self.task.terminal(command, background=True, notify_on_complete=True)
        self.assertIsNone(r["error"], r)
        return r["session_id"]

    def test_completion_reaches_the_generator_and_a_reconnection_gets_what_it_missed(self):
        with self.task.events() as stream:
            self.assertEqual(stream.ready(), "")
            sid = self.start("echo from-python; exit 2")
            first = next(iter(stream))
        self.assertIsInstance(first, BackgroundEvent)
        self.assertEqual(first.type, "completion")
        self.assertEqual(first.event["session_id"], sid)
        self.assertEqual(
            first.text,
            f"[IMPORTANT: Background process {sid} exited (exit code 2).\n"
            "Command: echo from-python; exit 2\nOutput:\nfrom-python\n]",
        )
        missed = self.start("echo missed")
        wait_exited(self.task, missed)
        with self.berth.events(self.task.task_id, after=first.id) as resumed:
            ev = next(iter(resumed))
            self.assertEqual(ev.event["session_id"], missed)
            self.assertEqual(resumed.last_id, ev.id)

    def test_the_session_yields_the_events_of_its_task(self):
        session = self.task.session()
        r = session.call("terminal", {"command": "echo on-session", "background": True, "notify_on_complete": True})
        got = next(session.events(timeout=60))
        self.assertEqual(got.type, "completion")
        self.assertEqual(got.event["session_id"], r["session_id"])
        self.assertIn("Output:\non-session\n]", got.text)
        session.close()


if __name__ == "__main__":
    unittest.main()
