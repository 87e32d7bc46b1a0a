"""Reads in chunks, atomic writes, and what is not a regular file."""
import errno
import os
import stat
import unittest

from berth_agent.files import FILE_CHUNK, MAX_PENDING_WRITES, NotRegular, PendingWrite, write_target

from .support import TempDir, bare_agent


def ops(agent):
    return [header for header, _ in agent.sock.frames()]


class Targets(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir(self)

    def test_a_write_through_links_lands_on_their_final_target(self):
        os.mkdir(self.tmp.join("real"))
        os.symlink("real/file.txt", self.tmp.join("first"))
        os.symlink("first", self.tmp.join("second"))
        self.assertEqual(write_target(self.tmp.join("second")), self.tmp.join("real", "file.txt"))

    def test_a_missing_path_is_its_own_target(self):
        self.assertEqual(write_target(self.tmp.join("new.txt")), self.tmp.join("new.txt"))

    def test_a_link_loop_is_refused(self):
        os.symlink("b", self.tmp.join("a"))
        os.symlink("a", self.tmp.join("b"))
        with self.assertRaises(OSError) as caught:
            write_target(self.tmp.join("a"))
        self.assertEqual(caught.exception.errno, errno.ELOOP)


class AtomicWrites(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir(self)

    def test_a_new_file_gets_the_umask_mode_and_no_temp_file_is_left(self):
        old = os.umask(0o027)
        try:
            pending = PendingWrite.begin(self.tmp.join("sub", "new.txt"))
        finally:
            os.umask(old)
        pending.append(b"hello ")
        pending.append(b"world")
        pending.commit()
        with open(self.tmp.join("sub", "new.txt"), "rb") as f:
            self.assertEqual(f.read(), b"hello world")
        self.assertEqual(stat.S_IMODE(os.stat(self.tmp.join("sub", "new.txt")).st_mode), 0o640)
        self.assertEqual(os.listdir(self.tmp.join("sub")), ["new.txt"])

    def test_an_existing_file_keeps_its_mode_and_is_replaced_whole(self):
        path = self.tmp.join("kept.txt")
        with open(path, "wb") as f:
            f.write(b"old content, longer than the new")
        os.chmod(path, 0o604)
        inode = os.stat(path).st_ino
        pending = PendingWrite.begin(path)
        pending.append(b"new")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"old content, longer than the new", "the file changed before the commit")
        pending.commit()
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"new")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o604)
        self.assertNotEqual(os.stat(path).st_ino, inode)

    def test_an_aborted_write_leaves_the_file_and_removes_its_temp_file(self):
        path = self.tmp.join("f.txt")
        with open(path, "wb") as f:
            f.write(b"before")
        pending = PendingWrite.begin(path)
        pending.append(b"after")
        self.assertEqual(len(os.listdir(self.tmp.path)), 2)
        pending.abort()
        self.assertEqual(os.listdir(self.tmp.path), ["f.txt"])
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"before")

    def test_a_fifo_is_not_written_through(self):
        os.mkfifo(self.tmp.join("pipe"))
        with self.assertRaises(NotRegular) as caught:
            PendingWrite.begin(self.tmp.join("pipe"))
        self.assertEqual(caught.exception.kind, "FIFO")

    def test_chunks_of_one_write_go_in_order_under_its_number(self):
        agent = bare_agent()
        path = self.tmp.join("chunked.txt")
        agent.dispatch({"op": "write", "id": 1, "path": path, "offset": 0, "last": False}, b"abc")
        number = ops(agent)[-1]["write"]
        agent.dispatch({"op": "write", "id": 2, "path": path, "offset": 3, "last": True, "write": number}, b"def")
        self.assertEqual([(h["op"], h["id"]) for h in ops(agent)], [("ok", 1), ("ok", 2)])
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"abcdef")
        self.assertEqual(agent.writes, {})

    def test_a_chunk_out_of_order_fails_the_write_and_removes_its_temp_file(self):
        agent = bare_agent()
        path = self.tmp.join("gap.txt")
        agent.dispatch({"op": "write", "id": 1, "path": path, "offset": 0, "last": False}, b"abc")
        number = ops(agent)[-1]["write"]
        agent.dispatch({"op": "write", "id": 2, "path": path, "offset": 10, "last": True, "write": number}, b"def")
        self.assertEqual(ops(agent)[-1]["errno"], "EINVAL")
        self.assertEqual(os.listdir(self.tmp.path), [])

    def test_writes_in_progress_are_bounded(self):
        agent = bare_agent()
        for i in range(MAX_PENDING_WRITES + 1):
            agent.dispatch({"op": "write", "id": i, "path": self.tmp.join("f%d" % i), "offset": 0, "last": False}, b"x")
        self.assertEqual(ops(agent)[-1]["errno"], "EBUSY")
        self.assertEqual(len(agent.writes), MAX_PENDING_WRITES)
        agent.abort_writes()
        self.assertEqual(os.listdir(self.tmp.path), [])


class Reads(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir(self)
        self.path = self.tmp.join("data.bin")
        with open(self.path, "wb") as f:
            f.write(b"0123456789")

    def read(self, **fields):
        agent = bare_agent()
        agent.dispatch(dict({"op": "read", "id": 1, "path": self.path}, **fields), b"")
        ((header, body),) = agent.sock.frames()
        return header, body

    def test_a_read_returns_its_range_and_says_when_the_file_ended(self):
        self.assertEqual(self.read(offset=2, length=3), ({"op": "data", "id": 1, "eof": False}, b"234"))
        self.assertEqual(self.read(offset=8, length=5), ({"op": "data", "id": 1, "eof": True}, b"89"))

    def test_a_read_never_returns_more_than_one_chunk(self):
        with open(self.path, "wb") as f:
            f.write(b"z" * (FILE_CHUNK + 10))
        header, body = self.read(offset=0, length=FILE_CHUNK * 4)
        self.assertEqual((len(body), header["eof"]), (FILE_CHUNK, False))

    def test_a_file_over_the_limit_is_refused_with_its_size(self):
        header, _ = self.read(offset=0, length=100, max=5)
        self.assertEqual((header["errno"], header["message"]), ("EFBIG", "10"))

    def test_what_is_not_a_regular_file_is_named(self):
        os.mkfifo(self.tmp.join("fifo"))
        self.path = self.tmp.join("fifo")
        header, _ = self.read(length=10)
        self.assertEqual((header["errno"], header["message"]), ("ENOTREG", "FIFO"))
        self.path = self.tmp.path
        self.assertEqual(self.read(length=10)[0]["errno"], "EISDIR")

    def test_stat_says_what_is_there(self):
        agent = bare_agent()
        agent.dispatch({"op": "stat", "id": 1, "path": self.path}, b"")
        agent.dispatch({"op": "stat", "id": 2, "path": self.tmp.join("missing")}, b"")
        found, missing = ops(agent)
        self.assertEqual((found["exists"], found["is_dir"], found["size"]), (True, False, 10))
        self.assertEqual(missing, {"op": "stat", "id": 2, "exists": False, "is_dir": False, "size": 0, "uid": -1})


if __name__ == "__main__":
    unittest.main()
