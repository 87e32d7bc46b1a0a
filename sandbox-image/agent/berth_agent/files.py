"""File operations: chunked reads, atomic writes (a temp file renamed over the target), stat."""

import errno
import os
import stat as stat_module

# File content per read reply / write request.
FILE_CHUNK = 256 * 1024


# Writes between their first and last chunk at once (the executor has one per file call in flight).
MAX_PENDING_WRITES = 64


# Bytes of a file's name kept in its temp file's name (`.NAME.berth-XXXXXX` stays under NAME_MAX).
TEMP_STEM_BYTES = 200
TEMP_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


# Symlinks followed from a write's path (the kernel's own limit).
MAX_SYMLINK_HOPS = 40


def write_target(path):
    """The file a write to `path` lands on: symlinks in its last component are followed, so the temp file and the
    rename happen beside the link's target and the link stays a link. A missing path (or a dangling link's missing
    target) is returned as is."""
    current = path
    for _ in range(MAX_SYMLINK_HOPS + 1):
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return current
        if not stat_module.S_ISLNK(info.st_mode):
            return current
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    raise OSError(errno.ELOOP, "too many levels of symbolic links")


class PendingWrite:
    """One atomic write: a temp file beside the target, renamed over it once complete."""

    def __init__(self, target, existing, fd, temp, mode):
        self.target = target
        self.existing = existing
        self.fd = fd
        self.temp = temp
        self.mode = mode
        self.size = 0

    @staticmethod
    def begin(path):
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        target = write_target(path)
        try:
            existing = os.stat(target)
        except FileNotFoundError:
            existing = None
        if existing is not None:
            if stat_module.S_ISDIR(existing.st_mode):
                raise OSError(errno.EISDIR, "is a directory")
            if not stat_module.S_ISREG(existing.st_mode):
                raise NotRegular(file_kind(existing.st_mode))
            # As the effective ids: with --user the real uid stays 0, and writes happen as the task's user.
            if not os.access(target, os.W_OK, effective_ids=os.access in os.supports_effective_ids):
                raise OSError(errno.EACCES, "permission denied")
        directory, name = os.path.split(target)
        stem = os.fsdecode(os.fsencode(name)[:TEMP_STEM_BYTES])
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        for attempt in range(8):
            suffix = "".join(TEMP_ALPHABET[b % len(TEMP_ALPHABET)] for b in os.urandom(6))
            temp = os.path.join(directory, ".%s.berth-%s" % (stem, suffix))
            try:
                # A new file: what the umask makes of 0666 is its mode; it is written as 0600 meanwhile.
                fd = os.open(temp, flags, 0o600 if existing is not None else 0o666)
                break
            except FileExistsError:
                if attempt == 7:
                    raise
        try:
            if existing is not None:
                mode = stat_module.S_IMODE(existing.st_mode)
            else:
                mode = stat_module.S_IMODE(os.fstat(fd).st_mode)
                os.fchmod(fd, 0o600)
        except BaseException:
            os.close(fd)
            os.unlink(temp)
            raise
        return PendingWrite(target, existing, fd, temp, mode)

    def append(self, data):
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.write(self.fd, view[written:])
        self.size += len(view)

    def commit(self):
        os.fsync(self.fd)
        existing = self.existing
        if existing is not None and (existing.st_uid != os.geteuid() or existing.st_gid != os.getegid()):
            try:
                os.fchown(self.fd, existing.st_uid, existing.st_gid)
            except OSError:
                pass  # only root (or the owner, for its own groups) may: the new file is the writer's
        os.fchmod(self.fd, self.mode)
        fd, self.fd = self.fd, -1
        os.close(fd)
        os.rename(self.temp, self.target)
        self.temp = None

    def abort(self):
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            try:
                os.close(fd)
            except OSError:
                pass
        if self.temp is not None:
            temp, self.temp = self.temp, None
            try:
                os.unlink(temp)
            except OSError:
                pass


class NotRegular(Exception):
    """A path that is not a regular file (nor a directory); `kind` says what it is."""

    def __init__(self, kind):
        Exception.__init__(self, kind)
        self.kind = kind


def file_kind(mode):
    if stat_module.S_ISCHR(mode):
        return "character device"
    if stat_module.S_ISBLK(mode):
        return "block device"
    if stat_module.S_ISFIFO(mode):
        return "FIFO"
    if stat_module.S_ISSOCK(mode):
        return "socket"
    return "special file"


class Files(object):
    """The agent's file operations (mixed into Agent)."""

    def open_regular(self, path, flags):
        """Opens without blocking (a FIFO would block open(2) forever); anything but a regular file is refused."""
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            info = os.fstat(fd)
            if stat_module.S_ISDIR(info.st_mode):
                raise OSError(errno.EISDIR, "is a directory")
            if not stat_module.S_ISREG(info.st_mode):
                raise NotRegular(file_kind(info.st_mode))
            return fd, info
        except BaseException:
            os.close(fd)
            raise

    def op_read(self, req_id, header):
        path = header["path"]
        offset = max(0, int(header.get("offset", 0)))
        length = max(0, min(int(header.get("length", FILE_CHUNK)), FILE_CHUNK))
        limit = int(header.get("max", 0))
        try:
            fd, info = self.open_regular(path, os.O_RDONLY)
        except NotRegular as err:
            self.send_error(req_id, "ENOTREG", err.kind)
            return
        except OSError as err:
            if err.errno == errno.ENXIO:  # open(2) of a socket
                self.send_error(req_id, "ENOTREG", "socket")
                return
            raise
        try:
            if limit > 0 and offset == 0 and info.st_size > limit:
                self.send_error(req_id, "EFBIG", str(info.st_size))
                return
            data = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        self.send({"op": "data", "id": req_id, "eof": len(data) < length}, data)

    def op_write(self, req_id, header, body):
        offset = max(0, int(header.get("offset", 0)))
        last = header.get("last", True) is not False
        if offset == 0:
            if len(self.writes) >= MAX_PENDING_WRITES:
                raise OSError(errno.EBUSY, "too many writes in progress")
            try:
                pending = PendingWrite.begin(header["path"])
            except NotRegular as err:
                self.send_error(req_id, "ENOTREG", err.kind)
                return
            number = self.next_write
            self.next_write += 1
        else:
            number = header.get("write")
            pending = self.writes.pop(number, None)
            if pending is None:
                raise OSError(errno.EBADF, "no such write in progress")
        try:
            if offset != pending.size:
                raise OSError(errno.EINVAL, "write chunk out of order")
            pending.append(body)
            if last:
                pending.commit()
            else:
                self.writes[number] = pending
        except BaseException:
            pending.abort()
            raise
        self.send({"op": "ok", "id": req_id, "write": number})

    def abort_writes(self):
        for pending in list(self.writes.values()):
            pending.abort()
        self.writes.clear()

    def op_stat(self, req_id, path):
        try:
            info = os.stat(path)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR):
                self.send({"op": "stat", "id": req_id, "exists": False, "is_dir": False, "size": 0, "uid": -1})
                return
            raise
        self.send({"op": "stat", "id": req_id, "exists": True, "is_dir": stat_module.S_ISDIR(info.st_mode),
                   "size": info.st_size, "uid": info.st_uid})
