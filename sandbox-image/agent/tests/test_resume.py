"""Being found again after a dropped stream: the linger socket's door, the bridge, the options."""
import json
import os
import socket
import struct
import subprocess
import sys
import unittest

from berth_agent.main import parse_stdio_options
from berth_agent.protocol import encode_frame
from berth_agent.resume import MAX_AUTH_FRAME, bridge, lingers_on, peer_pid, recv_exactly

from .support import TempDir, bare_agent


class LingerDoor(unittest.TestCase):
    """A connection to the linger socket becomes the stream only with the resume key as its first frame."""

    def setUp(self):
        self.tmp = TempDir(self)
        self.agent = bare_agent()
        self.agent.sock = None
        self.agent.linger_path = self.tmp.join("state", "linger.sock")
        self.attached = []
        self.agent.attach = self.attached.append
        self.agent.open_linger()
        self.addCleanup(self.agent.close_linger)

    def knock(self, data):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(client.close)
        client.connect(self.agent.linger_path)
        client.sendall(data)
        self.agent.on_linger()
        return client

    def assert_refused(self, client):
        self.assertEqual(self.attached, [])
        client.settimeout(2)
        try:
            data = client.recv(1)
        except ConnectionResetError:
            data = b""  # closed with what it sent unread
        self.assertEqual(data, b"", "the agent kept a connection that did not present its key")
        self.assertTrue(os.path.exists(self.agent.linger_path), "the linger socket went with a refused connection")

    def test_the_socket_and_its_directory_are_private(self):
        self.assertEqual(os.stat(os.path.dirname(self.agent.linger_path)).st_mode & 0o777, 0o700)
        self.assertEqual(os.stat(self.agent.linger_path).st_mode & 0o777, 0o600)

    def test_the_right_key_is_let_in_and_the_socket_closes_behind_it(self):
        self.knock(encode_frame({"op": "auth", "id": 0, "key": self.agent.resume_key}))
        self.assertEqual(len(self.attached), 1)
        self.assertFalse(os.path.exists(self.agent.linger_path))
        self.attached[0].close()

    def test_a_wrong_key_is_refused(self):
        self.assert_refused(self.knock(encode_frame({"op": "auth", "id": 0, "key": "f" * 32})))

    def test_another_first_frame_is_refused(self):
        self.assert_refused(self.knock(encode_frame({"op": "ping", "id": 0, "key": self.agent.resume_key})))

    def test_a_frame_with_a_body_or_over_the_auth_cap_is_refused(self):
        self.assert_refused(self.knock(encode_frame({"op": "auth", "id": 0, "key": self.agent.resume_key}, b"x")))
        head = json.dumps({"op": "auth", "id": 0, "key": self.agent.resume_key, "pad": "p" * MAX_AUTH_FRAME}).encode()
        self.assert_refused(self.knock(struct.pack(">II", 4 + len(head), len(head)) + head))


class Bridge(unittest.TestCase):
    def test_no_agent_lingering_means_starting_afresh(self):
        tmp = TempDir(self)
        # This process is no agent lingering on the path: nothing is signalled, nothing waited for.
        self.assertFalse(bridge(None, tmp.join("nobody.sock"), os.getpid()))

    def test_lingers_on_reads_the_command_line(self):
        path = "/tmp/berth-state-test/agent/linger.sock"
        code = "import sys; print('up', flush=True); sys.stdin.read()"
        child = subprocess.Popen([sys.executable, "-c", code, "--linger", path], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.addCleanup(child.stdout.close)
        try:
            self.assertEqual(child.stdout.readline(), b"up\n")
            self.assertTrue(lingers_on(child.pid, path))
            self.assertFalse(lingers_on(child.pid, path + ".other"))
        finally:
            child.stdin.close()
            child.wait()
        self.assertFalse(lingers_on(child.pid, path))

    def test_peer_pid_names_the_process_at_the_other_end(self):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with a, b:
            self.assertEqual(peer_pid(a), os.getpid())

    def test_recv_exactly_refuses_a_short_read(self):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with a, b:
            b.sendall(b"abc")
            b.shutdown(socket.SHUT_WR)
            with self.assertRaises(ValueError):
                recv_exactly(a, 8)


class StdioOptions(unittest.TestCase):
    def test_options_after_stdio(self):
        self.assertEqual(parse_stdio_options([]), (None, None))
        self.assertEqual(parse_stdio_options(["--linger", "/s/l.sock"]), ("/s/l.sock", None))
        self.assertEqual(parse_stdio_options(["--linger", "/s/l.sock", "--resume", "42"]), ("/s/l.sock", 42))

    def test_malformed_options_are_refused(self):
        for args in (["--linger", "relative.sock"], ["--resume", "42"], ["--linger", "/s", "--resume", "x"], ["--linger"], ["--other"]):
            self.assertIsNone(parse_stdio_options(args), args)


if __name__ == "__main__":
    unittest.main()
