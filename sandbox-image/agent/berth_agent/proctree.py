"""A command's process tree: its process group and its session, found through /proc and signalled
as a whole."""

import os


def tree_members(pgid):
    """Pids of live processes in process group `pgid` or in session `pgid`.

    A command starts in a new session whose id is its leader's pid, so its
    group and session ids both equal that pid. A process that moved to
    another group of the session (bash job control does) is still found
    through the session; only one that called setsid() itself escapes.
    """
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                data = f.read()
        except OSError:
            continue
        # After the command name: state ppid pgrp session ...
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) > 3 and fields[0] != b"Z" and (int(fields[2]) == pgid or int(fields[3]) == pgid):
            pids.append(int(entry))
    return pids


def signal_tree(pgid, sig):
    """Signals the command's process group and its session; False when none is left."""
    found = False
    try:
        os.killpg(pgid, sig)
        found = True
    except OSError:
        pass
    for pid in tree_members(pgid):
        try:
            os.kill(pid, sig)
            found = True
        except OSError:
            pass
    return found
