"""The two transports of the stream: a Unix socket the agent dialled, or its own stdin/stdout."""

import fcntl
import os


class SocketStream(object):
    """The channel over the Unix socket the agent dialled."""

    transport = "socket"

    def __init__(self, sock):
        self.sock = sock

    def fileno(self):
        return self.sock.fileno()

    def recv(self, size):
        return self.sock.recv(size)

    def sendall(self, data):
        self.sock.sendall(data)

    def close(self):
        self.sock.close()


class StdioStream(object):
    """The channel over two descriptors (what were the agent's stdin and stdout)."""

    transport = "stdio"

    def __init__(self, in_fd, out_fd):
        self.in_fd = in_fd
        self.out_fd = out_fd

    def fileno(self):
        return self.in_fd

    def recv(self, size):
        return os.read(self.in_fd, size)

    def sendall(self, data):
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.out_fd, view)
            except InterruptedError:
                continue
            view = view[n:]

    def close(self):
        for fd in (self.in_fd, self.out_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def take_stdio():
    """Moves the channel off fd 0/1 to private close-on-exec descriptors; 0 and 1 become /dev/null.

    Commands get their own pipes for 0-2 and inherit nothing else, but a
    library the agent loads, or a child started without explicit stdio,
    would otherwise read or write the channel itself.
    """
    in_fd = fcntl.fcntl(0, fcntl.F_DUPFD, 10)
    out_fd = fcntl.fcntl(1, fcntl.F_DUPFD, 10)
    for fd in (in_fd, out_fd):
        os.set_inheritable(fd, False)
    # Frames are written whole (sendall); a non-blocking pipe would cut one short.
    os.set_blocking(out_fd, True)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return StdioStream(in_fd, out_fd)
