"""The socket relay: Unix sockets inside the sandbox whose connections are carried over the stream."""

import errno
import os
import selectors
import shutil
import socket

from .protocol import READ_CHUNK, log

PTY_ROWS, PTY_COLS = 50, 200
# The socket relay: bytes forwarded on one connection ahead of the executor's
# acks; connections per listener; bytes queued toward one connection before
# it is dropped (a client that sends requests and never reads the answers).
RELAY_WINDOW = 256 * 1024
RELAY_MAX_CONNECTIONS = 64
RELAY_MAX_QUEUE = 64 * 1024 * 1024


class Listener(object):
    """A relayed Unix socket: where it is and its live connections."""

    def __init__(self, req_id, sock, path):
        self.id = req_id
        self.sock = sock
        self.path = path
        self.conns = {}  # conn number -> Conn


class Conn(object):
    """One connection to a relayed socket."""

    def __init__(self, listener, number, sock):
        self.listener = listener
        self.number = number
        self.sock = sock
        self.unacked = 0  # forwarded bytes the executor has not acked yet
        self.out = bytearray()  # bytes from the executor not written yet
        self.read_eof = False
        self.shut_wanted = False
        self.events = 0  # what the selector watches for now


class Relay(object):
    """The agent's relayed sockets (mixed into Agent)."""

    def op_listen(self, req_id, path):
        if req_id in self.listeners:
            raise OSError(errno.EEXIST, "request id in use")
        parent = os.path.dirname(path) or "."
        try:
            os.mkdir(parent, 0o700)
        except FileExistsError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Nobody may connect before the mode is 0600: bind under a umask that leaves only us.
            old_umask = os.umask(0o177)
            try:
                sock.bind(path)
            finally:
                os.umask(old_umask)
            os.chmod(path, 0o600)
            sock.listen(RELAY_MAX_CONNECTIONS)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        listener = Listener(req_id, sock, path)
        self.listeners[req_id] = listener
        self.sel.register(sock, selectors.EVENT_READ, ("listen", listener))
        self.send({"op": "ok", "id": req_id})

    def op_unlisten(self, req_id, header):
        listener = self.listeners.get(header.get("listener"))
        if listener is not None:
            self.close_listener(listener)
        remove = header.get("remove")
        if isinstance(remove, str) and remove not in ("", "/"):
            shutil.rmtree(remove, ignore_errors=True)
        self.send({"op": "ok", "id": req_id})

    def close_listener(self, listener):
        self.listeners.pop(listener.id, None)
        for conn in list(listener.conns.values()):
            self.close_conn(conn, False)
        try:
            self.sel.unregister(listener.sock)
        except (KeyError, ValueError):
            pass
        listener.sock.close()
        try:
            os.unlink(listener.path)
        except OSError:
            pass

    def on_accept(self, listener):
        while True:
            try:
                sock, _ = listener.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                log("accept on %s failed: %s" % (listener.path, err))
                return
            if len(listener.conns) >= RELAY_MAX_CONNECTIONS:
                sock.close()
                continue
            sock.setblocking(False)
            conn = Conn(listener, self.next_conn, sock)
            self.next_conn += 1
            listener.conns[conn.number] = conn
            self.send({"op": "conn", "id": listener.id, "conn": conn.number})
            self.watch_conn(conn)

    def watch_conn(self, conn):
        events = 0
        if not conn.read_eof and conn.unacked < RELAY_WINDOW:
            events |= selectors.EVENT_READ
        if conn.out:
            events |= selectors.EVENT_WRITE
        if events == conn.events:
            return
        if conn.events == 0:
            self.sel.register(conn.sock, events, ("relay", conn))
        elif events == 0:
            self.sel.unregister(conn.sock)
        else:
            self.sel.modify(conn.sock, events, ("relay", conn))
        conn.events = events

    def close_conn(self, conn, tell):
        if conn.listener.conns.pop(conn.number, None) is None:
            return
        if conn.events:
            try:
                self.sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.events = 0
        conn.sock.close()
        if tell:
            self.send({"op": "cclosed", "id": conn.listener.id, "conn": conn.number})

    def on_relay(self, conn, mask):
        if mask & selectors.EVENT_WRITE:
            self.flush_conn(conn)
        if mask & selectors.EVENT_READ and conn.number in conn.listener.conns and conn.unacked < RELAY_WINDOW:
            try:
                data = conn.sock.recv(min(READ_CHUNK, RELAY_WINDOW - conn.unacked))
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                self.close_conn(conn, True)
                return
            if data:
                conn.unacked += len(data)
                self.send({"op": "cdata", "id": conn.listener.id, "conn": conn.number}, data)
            elif data is not None:
                conn.read_eof = True
                self.send({"op": "cend", "id": conn.listener.id, "conn": conn.number})
        if conn.number in conn.listener.conns:
            self.watch_conn(conn)

    def flush_conn(self, conn):
        written = 0
        while conn.out:
            try:
                n = conn.sock.send(bytes(conn.out[:READ_CHUNK]))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.close_conn(conn, True)
                return
            del conn.out[:n]
            written += n
        if written:
            self.send({"op": "cack", "id": conn.listener.id, "conn": conn.number, "bytes": written})
        if not conn.out and conn.shut_wanted:
            conn.shut_wanted = False
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def op_relay(self, op, header, body):
        """The executor's side of a relayed connection; never answered (the connection may be gone already)."""
        listener = self.listeners.get(header.get("id"))
        conn = listener.conns.get(header.get("conn")) if listener is not None else None
        if conn is None:
            return
        if op == "cdata":
            conn.out += body
            if len(conn.out) > RELAY_MAX_QUEUE:
                log("relay connection %d does not read its answers; closing it" % conn.number)
                self.close_conn(conn, True)
                return
            self.flush_conn(conn)
        elif op == "cack":
            conn.unacked = max(0, conn.unacked - max(0, int(header.get("bytes", 0))))
        elif op == "cshut":
            conn.shut_wanted = True
            self.flush_conn(conn)
        elif op == "cclose":
            self.close_conn(conn, False)
            return
        if conn.number in conn.listener.conns:
            self.watch_conn(conn)
