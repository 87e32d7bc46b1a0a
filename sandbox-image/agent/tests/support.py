"""What the agent's unit tests share: an agent without its main loop, and a stream that records frames."""
import os
import selectors
import subprocess
import sys
import tempfile

from berth_agent.agent import Agent
from berth_agent.protocol import take_frame

AGENT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RecordingStream(object):
    """A stream that keeps what the agent sends; `frames()` decodes it as the executor would."""

    transport = "stdio"

    def __init__(self):
        self.sent = bytearray()
        self.closed = False

    def sendall(self, data):
        self.sent += data

    def close(self):
        self.closed = True

    def frames(self):
        buf = bytearray(self.sent)
        out = []
        while True:
            frame = take_frame(buf)
            if frame is None:
                break
            out.append(frame)
        if buf:
            raise AssertionError("%d bytes of a partial frame left" % len(buf))
        return out


def bare_agent():
    """An Agent with its state but no signals, pipes or loop: for calling one operation at a time."""
    agent = Agent.__new__(Agent)
    agent.sock = RecordingStream()
    agent.user = None
    agent.transport = "stdio"
    agent.token = ""
    agent.resume_key = "0123456789abcdef0123456789abcdef"
    agent.redial_path = None
    agent.redial_peer = None
    agent.linger_path = None
    agent.linger_sock = None
    agent.detached_until = None
    agent.sel = selectors.DefaultSelector()
    agent.procs = {}
    agent.by_pid = {}
    agent.inbuf = bytearray()
    agent.running = True
    agent.listeners = {}
    agent.writes = {}
    agent.next_write = 1
    agent.next_conn = 1
    return agent


def build_archive(directory):
    """The agent's archive built from this checkout into `directory`; its path."""
    out = os.path.join(directory, "berth_agent.pyz")
    subprocess.run([sys.executable, os.path.join(AGENT_DIR, "build.py"), out], check=True)
    return out


class TempDir(object):
    """A private temporary directory for one test (setUp/tearDown helpers)."""

    def __init__(self, case):
        self.holder = tempfile.TemporaryDirectory(prefix="berth-agent-test-")
        case.addCleanup(self.holder.cleanup)
        self.path = self.holder.name

    def join(self, *parts):
        return os.path.join(self.path, *parts)
