"""The wire format and what every part of the agent shares: frames, the version and
capabilities announced in the hello, error names, the log on stderr."""

import errno
import json
import struct
import sys

VERSION = 2


# What this agent can do, announced in its hello; the executor may check for an item before using it.
CAPABILITIES = ["spawn", "pty", "background", "files", "counters", "prestart", "relay", "resume", "task-user", "atomic-write"]


# Largest frame accepted from the executor, and sent to it (its own cap).
MAX_FRAME = 16 * 1024 * 1024
MAX_SEND_FRAME = 1024 * 1024


# Error messages are cut to this many characters, so an error frame stays small.
MAX_ERROR_MESSAGE = 4096


# Bytes taken per read of a command's output or a relayed connection: one frame's body.
READ_CHUNK = 64 * 1024


def log(message):
    try:
        sys.stderr.write("berth-agent: %s\n" % message)
        sys.stderr.flush()
    except Exception:
        pass


def encode_frame(header, body=b""):
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return struct.pack(">II", 4 + len(head) + len(body), len(head)) + head + body


class BadFrame(ValueError):
    """A frame whose lengths no executor sends: the stream is not to be trusted any further."""


def take_frame(buf):
    """The first whole frame of `buf` (a bytearray) as (header, body), removed from it; None while it is
    incomplete. Raises BadFrame for lengths out of bounds (over MAX_FRAME, under 4, a header longer than the
    frame), which the agent checks before waiting for the rest."""
    if len(buf) < 8:
        return None
    total, head_len = struct.unpack(">II", bytes(buf[:8]))
    if total > MAX_FRAME or total < 4 or head_len > total - 4:
        raise BadFrame("bad frame (length %d, header %d)" % (total, head_len))
    if len(buf) < 4 + total:
        return None
    header = json.loads(bytes(buf[8:8 + head_len]).decode("utf-8"))
    body = bytes(buf[8 + head_len:4 + total])
    del buf[:4 + total]
    return header, body


def errno_name(err):
    code = getattr(err, "errno", None)
    if code is None:
        return "EIO"
    return errno.errorcode.get(code, "EIO")
