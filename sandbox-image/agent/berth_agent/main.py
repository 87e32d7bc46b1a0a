"""The command line: which transport, which user, the token; then the agent runs."""

import errno
import os
import socket
import sys
import time

from .agent import Agent
from .protocol import log
from .resume import bridge, peer_pid
from .streams import SocketStream, take_stdio
from .taskuser import become_subreaper, become_task_user, make_undumpable, parse_ids, survive_parent


def take_token(path):
    """The token from its file, which is removed at once: nothing started later can find it."""
    try:
        with open(path, "r") as f:
            token = f.read().strip()
    finally:
        try:
            os.unlink(path)
        except OSError as err:
            if err.errno != errno.ENOENT:
                log("cannot remove %s: %s" % (path, err))
    return token


def connect(path, timeout):
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError as err:
            sock.close()
            if time.monotonic() >= deadline:
                raise OSError(err.errno, "cannot connect to %s: %s" % (path, err.strerror))
            time.sleep(0.05)


def main():
    """Runs the agent as the command line says; the exit status (the archive's __main__.py checked the Python version)."""
    make_undumpable()
    if sys.argv[1:2] == ["--stdio"]:
        options = parse_stdio_options(sys.argv[2:])
        if options is None:
            log("usage: berth_agent.pyz --stdio [--linger PATH [--resume PID]]")
            return 2
        linger_path, resume_pid = options
        stream = take_stdio()
        if resume_pid is not None and bridge(stream, linger_path, resume_pid):
            return 0
        if linger_path is not None:
            survive_parent()
        become_subreaper()
        Agent(stream, "", linger_path=linger_path).run()
        return 0
    args = sys.argv[1:]
    ids = None
    if args[:1] == ["--user"]:
        ids = parse_ids(args[1]) if len(args) > 1 else None
        if ids is None:
            log("usage: berth_agent.pyz [--user UID:GID] [SOCKET [TOKEN_FILE]] (UID and GID not 0)")
            return 2
        args = args[2:]
    path = args[0] if args else os.environ.get("BERTH_AGENT_SOCKET", "/run/berth/agent.sock")
    token_path = args[1] if len(args) > 1 else os.path.join(os.path.dirname(path), "agent-token")
    try:
        token = take_token(token_path)
    except OSError as err:
        log("cannot read the agent token: %s" % err)
        return 3
    try:
        sock = connect(path, 30.0)
    except OSError as err:
        log(str(err))
        return 1
    try:
        first_peer = peer_pid(sock)
    except OSError as err:
        log("cannot tell who listens on %s (%s); a dropped stream will not be resumed" % (path, err))
        first_peer = None
    user = None
    if ids is not None:
        try:
            user = become_task_user(*ids)
        except OSError as err:
            # Never run a command as root instead: exit before the hello, and the executor does not use us.
            log("cannot act as the task's user %d:%d: %s" % (ids[0], ids[1], err))
            return 5
        make_undumpable()  # a change of ids resets it
    Agent(SocketStream(sock), token, redial_path=path if first_peer is not None else None, redial_peer=first_peer,
          user=user).run()
    return 0


def parse_stdio_options(args):
    """(linger path or None, resume pid or None) from what follows --stdio; None when malformed."""
    linger_path = resume_pid = None
    while args:
        if args[0] == "--linger" and len(args) > 1 and os.path.isabs(args[1]):
            linger_path = args[1]
        elif args[0] == "--resume" and len(args) > 1 and args[1].isdigit():
            resume_pid = int(args[1])
        else:
            return None
        args = args[2:]
    if resume_pid is not None and linger_path is None:
        return None
    return linger_path, resume_pid
