"""The agent as the executor runs it, for tests of what it does with real processes: a child process started
from this checkout's sources, spoken to in frames over its stdio (`--stdio`) or over a socket it dials
(`--user` needs that mode). Every read has a deadline, so a test fails instead of hanging."""
import os
import select
import socket
import subprocess
import sys
import tempfile
import time

from berth_agent.protocol import encode_frame, take_frame

from .support import AGENT_DIR

# The agent's command line runs this: the package from the checkout, as the archive's __main__.py runs it.
ENTRY = "import sys; sys.path.insert(0, %r); from berth_agent.main import main; sys.exit(main())" % AGENT_DIR
DEADLINE = 10.0


class AgentProcess(object):
    """One running agent. `case` (a TestCase) gets the cleanup: the agent is told bye and waited for."""

    def __init__(self, case, args=("--stdio",), env=None, user=None, listen=None):
        self.log = tempfile.TemporaryFile()
        case.addCleanup(self.log.close)
        self.inbuf = bytearray()
        self.backlog = []
        command = [sys.executable, "-B", "-c", ENTRY] + list(args)
        if listen is None:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                         env=env, user=user)
            self.read_fd = self.proc.stdout.fileno()
            self.write = self.proc.stdin.write
            self.flush = self.proc.stdin.flush
        else:
            # `listen`: a bound, listening Unix socket the agent dials (its path is among `args`).
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log,
                                         env=env, user=user)
            listen.settimeout(DEADLINE)
            self.conn, _ = listen.accept()
            case.addCleanup(self.conn.close)
            self.read_fd = self.conn.fileno()
            self.write = self.conn.sendall
            self.flush = lambda: None
        case.addCleanup(self.close)
        self.hello = self.next_frame()[0]
        case.assertEqual(self.hello["op"], "hello", self.stderr())

    def stderr(self):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def send(self, header, body=b""):
        self.write(encode_frame(header, body))
        self.flush()

    def next_frame(self, timeout=DEADLINE):
        """The next frame the agent sends; AssertionError when none comes in time."""
        deadline = time.monotonic() + timeout
        while True:
            frame = take_frame(self.inbuf)
            if frame is not None:
                return frame
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.read_fd], [], [], left)[0]:
                raise AssertionError("no frame from the agent within %.1fs; its log:\n%s" % (timeout, self.stderr()))
            data = os.read(self.read_fd, 1 << 16)
            if not data:
                raise AssertionError("the agent closed its stream; its log:\n%s" % self.stderr())
            self.inbuf += data

    def frame_for(self, req_id, timeout=DEADLINE):
        """The next frame about request `req_id`; frames about other requests wait in a backlog."""
        for i, (header, body) in enumerate(self.backlog):
            if header.get("id") == req_id:
                del self.backlog[i]
                return header, body
        while True:
            header, body = self.next_frame(timeout)
            if header.get("id") == req_id:
                return header, body
            self.backlog.append((header, body))

    def request(self, header, body=b""):
        """Sends a request and returns the agent's answer (header) to it."""
        self.send(header, body)
        return self.frame_for(header["id"])[0]

    def spawn(self, req_id, script, body=b"", **fields):
        """Starts `bash -c script`; the pid the agent announced."""
        started = self.request(dict({"op": "spawn", "id": req_id, "script": script}, **fields), body)
        if started["op"] != "started":
            raise AssertionError("spawn answered %r" % (started,))
        return started["pid"]

    def read_until(self, req_id, text, timeout=DEADLINE):
        """Output of `req_id` up to and including `text`; what follows stays for finish()."""
        out = bytearray()
        while text not in out:
            header, body = self.frame_for(req_id, timeout)
            if header["op"] != "out":
                raise AssertionError("%r before %r came; output so far %r" % (header, text, bytes(out)))
            out += body
        cut = out.index(text) + len(text)
        if cut < len(out):
            self.backlog.insert(0, ({"op": "out", "id": req_id}, bytes(out[cut:])))
        return bytes(out[:cut])

    def finish(self, req_id, timeout=DEADLINE):
        """(output bodies, exit header) of request `req_id` until its exit."""
        bodies = []
        while True:
            header, body = self.frame_for(req_id, timeout)
            if header["op"] == "exit":
                return bodies, header
            if header["op"] != "out":
                raise AssertionError("%r before the exit; output so far %r" % (header, b"".join(bodies)))
            bodies.append(body)

    def run(self, req_id, script, body=b"", **fields):
        """(output, exit header) of a command run to its end."""
        self.spawn(req_id, script, body, **fields)
        bodies, exit_header = self.finish(req_id)
        return b"".join(bodies), exit_header

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send({"op": "bye", "id": 0})
                self.proc.wait(DEADLINE)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def listening_socket(case, path):
    """A Unix socket listening at `path` for an agent to dial, closed with the test."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    case.addCleanup(sock.close)
    sock.bind(path)
    sock.listen(1)
    return sock


def process_state(pid):
    """The state letter of /proc/PID/stat (R, S, Z...), or None once the process is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].split()[0].decode()


def process_group(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        data = f.read()
    return int(data[data.rfind(b")") + 2:].split()[2])
