"""Frames, their bounds, and what the agent says in them."""
import errno
import json
import os
import struct
import unittest

from berth_agent import protocol
from berth_agent.protocol import MAX_FRAME, MAX_SEND_FRAME, BadFrame, encode_frame, errno_name, take_frame

from .support import TempDir, bare_agent


class Framing(unittest.TestCase):
    def test_a_frame_is_total_length_header_length_compact_json_and_body(self):
        frame = encode_frame({"op": "out", "id": 7}, b"\x00bytes")
        head = b'{"op":"out","id":7}'
        self.assertEqual(frame, struct.pack(">II", 4 + len(head) + 6, len(head)) + head + b"\x00bytes")

    def test_frames_come_out_one_at_a_time_and_leave_the_rest(self):
        buf = bytearray(encode_frame({"op": "ping", "id": 1}) + encode_frame({"op": "stdin", "id": 2}, b"abc") + b"\x00\x00")
        self.assertEqual(take_frame(buf), ({"op": "ping", "id": 1}, b""))
        self.assertEqual(take_frame(buf), ({"op": "stdin", "id": 2}, b"abc"))
        self.assertIsNone(take_frame(buf))
        self.assertEqual(buf, bytearray(b"\x00\x00"))

    def test_an_incomplete_frame_waits_untouched(self):
        whole = encode_frame({"op": "write", "id": 3}, b"x" * 100)
        for cut in (0, 3, 8, 20, len(whole) - 1):
            buf = bytearray(whole[:cut])
            self.assertIsNone(take_frame(buf))
            self.assertEqual(bytes(buf), whole[:cut])

    def test_non_utf8_bytes_of_a_body_pass_unchanged(self):
        body = bytes(range(256))
        self.assertEqual(take_frame(bytearray(encode_frame({"op": "cdata", "id": 1, "conn": 2}, body))), ({"op": "cdata", "id": 1, "conn": 2}, body))


class Bounds(unittest.TestCase):
    def test_a_frame_of_max_frame_bytes_is_waited_for(self):
        self.assertIsNone(take_frame(bytearray(struct.pack(">II", MAX_FRAME, 2) + b"{}")))

    def test_a_frame_over_max_frame_is_refused_before_its_rest_arrives(self):
        with self.assertRaises(BadFrame) as caught:
            take_frame(bytearray(struct.pack(">II", MAX_FRAME + 1, 2)))
        self.assertIn("length %d" % (MAX_FRAME + 1), str(caught.exception))

    def test_lengths_that_do_not_add_up_are_refused(self):
        for total, head in ((3, 0), (0, 0), (10, 7), (4, 1)):
            with self.assertRaises(BadFrame, msg="total %d header %d" % (total, head)):
                take_frame(bytearray(struct.pack(">II", total, head) + b"x" * 16))

    def test_a_reply_over_the_executors_cap_goes_as_an_error_instead(self):
        agent = bare_agent()
        agent.send({"op": "data", "id": 9, "eof": True}, b"x" * MAX_SEND_FRAME)
        agent.send({"op": "data", "id": 10, "eof": True}, b"y" * 1000)
        (first, _), (second, body) = agent.sock.frames()
        self.assertEqual(first, {"op": "error", "id": 9, "errno": "EMSGSIZE", "message": "reply too large"})
        self.assertEqual((second["id"], body), (10, b"y" * 1000))

    def test_error_messages_are_cut(self):
        agent = bare_agent()
        agent.send_error(4, "EIO", "m" * (protocol.MAX_ERROR_MESSAGE + 50))
        ((header, _),) = agent.sock.frames()
        self.assertEqual(len(header["message"]), protocol.MAX_ERROR_MESSAGE)

    def test_nothing_is_sent_without_a_stream(self):
        agent = bare_agent()
        agent.sock = None
        agent.send({"op": "out", "id": 1}, b"waits in its pipe")


class Errors(unittest.TestCase):
    def test_errno_names(self):
        self.assertEqual(errno_name(OSError(errno.ENOENT, "gone")), "ENOENT")
        self.assertEqual(errno_name(ValueError("no errno")), "EIO")
        self.assertEqual(errno_name(OSError(99999, "unknown")), "EIO")

    def test_an_os_error_of_an_operation_is_answered_with_its_name(self):
        tmp = TempDir(self)
        os.symlink("b", tmp.join("a"))
        os.symlink("a", tmp.join("b"))
        agent = bare_agent()
        agent.dispatch({"op": "stat", "id": 5, "path": tmp.join("a")}, b"")
        ((header, _),) = agent.sock.frames()
        self.assertEqual((header["op"], header["id"], header["errno"]), ("error", 5, "ELOOP"))

    def test_an_unknown_op_is_refused_by_name(self):
        agent = bare_agent()
        agent.dispatch({"op": "format-disk", "id": 6}, b"")
        ((header, _),) = agent.sock.frames()
        self.assertEqual(header, {"op": "error", "id": 6, "errno": "EINVAL", "message": "unknown op 'format-disk'"})


class Hello(unittest.TestCase):
    def test_the_hello_carries_the_token_then_the_resume_key_on_a_resume(self):
        agent = bare_agent()
        agent.token = "start-token"
        agent.send_hello(False)
        agent.send_hello(True)
        (first, _), (again, _) = agent.sock.frames()
        self.assertEqual(list(first), ["op", "id", "token", "version", "pid", "python", "transport", "capabilities", "resume_key", "resumed"])
        self.assertEqual((first["token"], first["resumed"], first["version"]), ("start-token", False, protocol.VERSION))
        self.assertEqual((again["token"], again["resumed"]), (agent.resume_key, True))
        self.assertEqual(first["capabilities"], protocol.CAPABILITIES)
        self.assertEqual(json.loads(json.dumps(first)), first)


if __name__ == "__main__":
    unittest.main()
