"""The stdio agent that lingers after its stream drops (--linger) survives a hangup itself, but the commands it
starts must not inherit that: they see SIGHUP at its default, on pipes and on a pty."""
import signal
import unittest

from .agent_process import AgentProcess
from .support import TempDir

# SigIgn of /proc/self/status, as a mask: bit (n - 1) is signal n.
IGNORED = "awk '/^SigIgn:/ {print $2}' /proc/self/status"


def ignores_hangup(output):
    return bool(int(output.decode().strip().splitlines()[-1], 16) & (1 << (signal.SIGHUP - 1)))


class Linger(unittest.TestCase):
    def setUp(self):
        tmp = TempDir(self)
        self.agent = AgentProcess(self, args=("--stdio", "--linger", tmp.join("linger")))

    def test_a_command_on_pipes_gets_sighup_at_its_default(self):
        output, exit_header = self.agent.run(1, IGNORED)
        self.assertEqual(exit_header["code"], 0, output)
        self.assertFalse(ignores_hangup(output), output)

    def test_a_command_on_a_pty_gets_sighup_at_its_default(self):
        output, exit_header = self.agent.run(1, IGNORED, pty=True)
        self.assertEqual(exit_header["code"], 0, output)
        self.assertFalse(ignores_hangup(output), output)

    def test_a_hangup_ends_a_command_as_it_would_anywhere(self):
        _, exit_header = self.agent.run(1, "kill -HUP $$; sleep 5")
        self.assertEqual((exit_header["code"], exit_header["signal"]), (None, signal.SIGHUP))


if __name__ == "__main__":
    unittest.main()
