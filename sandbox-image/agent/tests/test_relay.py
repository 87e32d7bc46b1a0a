"""The socket relay: a Unix socket in the sandbox whose connections travel over the stream, with a window of
unacked bytes, a cap on connections and on what a connection that does not read may queue."""
import os
import selectors
import socket
import stat
import unittest

from berth_agent.relay import RELAY_MAX_CONNECTIONS, RELAY_MAX_QUEUE, RELAY_WINDOW

from .support import TempDir, bare_agent


class Relay(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir(self)
        self.agent = bare_agent()
        self.path = self.tmp.join("run", "rpc.sock")
        self.agent.dispatch({"op": "listen", "id": 7, "path": self.path}, b"")
        self.listener = self.agent.listeners[7]
        self.addCleanup(lambda: [self.agent.close_listener(l) for l in list(self.agent.listeners.values())])

    def sent(self):
        """Frames the agent sent since the last call."""
        frames = self.agent.sock.frames()
        self.agent.sock.sent = bytearray()
        return frames

    def connect(self):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(client.close)
        client.settimeout(5)
        client.connect(self.path)
        self.agent.on_accept(self.listener)
        return client

    def only_conn(self):
        (conn,) = self.listener.conns.values()
        return conn

    def pump(self):
        """What the main loop does for the connection when its socket is readable."""
        conn = self.only_conn()
        self.agent.on_relay(conn, selectors.EVENT_READ)

    def test_the_socket_is_private_and_its_new_directory_too(self):
        self.assertEqual(self.sent(), [({"op": "ok", "id": 7}, b"")])
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(self.path)).st_mode), 0o700)

    def test_a_connection_is_announced_and_its_bytes_go_both_ways_with_acks(self):
        self.sent()
        client = self.connect()
        self.assertEqual(self.sent(), [({"op": "conn", "id": 7, "conn": 1}, b"")])
        client.sendall(b"request")
        self.pump()
        self.assertEqual(self.sent(), [({"op": "cdata", "id": 7, "conn": 1}, b"request")])
        self.agent.dispatch({"op": "cdata", "id": 7, "conn": 1}, b"answer")
        self.assertEqual(client.recv(100), b"answer")
        self.assertEqual(self.sent(), [({"op": "cack", "id": 7, "conn": 1, "bytes": 6}, b"")])

    def test_each_side_shutting_its_writes_is_passed_on(self):
        client = self.connect()
        self.sent()
        self.agent.dispatch({"op": "cdata", "id": 7, "conn": 1}, b"last")
        self.agent.dispatch({"op": "cshut", "id": 7, "conn": 1}, b"")
        self.assertEqual(client.recv(100), b"last")
        self.assertEqual(client.recv(100), b"", "the client's reading side did not end")
        client.shutdown(socket.SHUT_WR)
        self.pump()
        self.assertEqual(self.sent(), [({"op": "cack", "id": 7, "conn": 1, "bytes": 4}, b""),
                                       ({"op": "cend", "id": 7, "conn": 1}, b"")])

    def test_a_close_from_the_executor_closes_the_connection_unanswered(self):
        client = self.connect()
        self.sent()
        self.agent.dispatch({"op": "cclose", "id": 7, "conn": 1}, b"")
        self.assertEqual(client.recv(100), b"")
        self.assertEqual(self.listener.conns, {})
        self.assertEqual(self.sent(), [])

    def test_no_more_than_a_window_is_forwarded_ahead_of_the_acks(self):
        client = self.connect()
        self.sent()
        conn = self.only_conn()
        client.setblocking(False)
        pending = b"x" * (RELAY_WINDOW + 100000)
        forwarded = 0

        def exchange(rounds):
            nonlocal pending, forwarded
            for _ in range(rounds):
                if pending:
                    try:
                        pending = pending[client.send(pending):]
                    except BlockingIOError:
                        pass
                self.pump()
                forwarded += sum(len(body) for _, body in self.sent())

        exchange(200)
        self.assertEqual(pending, b"", "the client could not send everything")
        self.assertEqual(forwarded, RELAY_WINDOW)
        self.assertFalse(conn.events & selectors.EVENT_READ, "still reading past the window")
        self.agent.dispatch({"op": "cack", "id": 7, "conn": 1, "bytes": 100000}, b"")
        exchange(50)
        self.assertEqual(forwarded, RELAY_WINDOW + 100000)

    def test_connections_over_the_cap_are_closed_at_once(self):
        clients = [self.connect() for _ in range(RELAY_MAX_CONNECTIONS + 1)]
        self.assertEqual(len(self.listener.conns), RELAY_MAX_CONNECTIONS)
        self.assertEqual([h["op"] for h, _ in self.sent()], ["ok"] + ["conn"] * RELAY_MAX_CONNECTIONS)
        self.assertEqual(clients[-1].recv(1), b"")

    def test_a_connection_that_does_not_read_its_answers_is_dropped_past_the_queue_cap(self):
        client = self.connect()
        self.sent()
        self.agent.dispatch({"op": "cdata", "id": 7, "conn": 1}, b"a" * (RELAY_MAX_QUEUE + 1))
        self.assertEqual(self.sent(), [({"op": "cclosed", "id": 7, "conn": 1}, b"")])
        self.assertEqual(self.listener.conns, {})
        client.close()

    def test_unlisten_closes_the_connections_and_removes_the_socket_and_its_directory(self):
        client = self.connect()
        self.sent()
        self.agent.dispatch({"op": "unlisten", "id": 8, "listener": 7, "remove": os.path.dirname(self.path)}, b"")
        self.assertEqual(self.sent(), [({"op": "ok", "id": 8}, b"")])
        self.assertEqual(client.recv(1), b"")
        self.assertFalse(os.path.exists(os.path.dirname(self.path)))
        self.assertEqual(self.agent.listeners, {})

    def test_frames_for_a_connection_that_is_gone_are_ignored(self):
        self.sent()
        self.agent.dispatch({"op": "cdata", "id": 7, "conn": 99}, b"lost")
        self.agent.dispatch({"op": "cack", "id": 99, "conn": 1, "bytes": 5}, b"")
        self.assertEqual(self.sent(), [])


if __name__ == "__main__":
    unittest.main()
