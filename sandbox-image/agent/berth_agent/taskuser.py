"""The task's user (`--user UID:GID`) and the process attributes the agent sets on itself: capabilities,
non-dumpable, subreaper, surviving its parent."""

import os
import pwd
import signal
import sys

from .protocol import log


class _NoSwitch(object):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _AsRoot(object):
    """Effective uid 0 (and the two capabilities kept) for the body; the task's again after."""

    def __init__(self, user):
        self.user = user

    def __enter__(self):
        os.seteuid(0)
        return self

    def __exit__(self, *exc):
        os.seteuid(self.user.uid)
        return False


class TaskUser(object):
    """The task's ids (`--user`): the agent's effective ids between spawns, each child's for good."""

    def __init__(self, uid, gid, groups):
        self.uid = uid
        self.gid = gid
        self.groups = groups

    def root(self):
        return _AsRoot(self)

    def become(self):
        """In a child forked as root: real, effective and saved ids become the task's (no way back)."""
        os.setgroups(self.groups)
        os.setgid(self.gid)
        os.setuid(self.uid)

    def popen_ids(self):
        """Popen arguments that start its child as the task's user (fork, not vfork: it switches ids)."""
        if sys.version_info[:2] >= (3, 9):
            return {"user": self.uid, "group": self.gid, "extra_groups": self.groups}
        return {"preexec_fn": self.become}


CAP_SETGID = 6
CAP_SETUID = 7


def keep_capabilities(*caps):
    """Reduces our permitted and effective capabilities to `caps` (capset(2); reducing needs no privilege)."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set
    data = (Data * 2)()
    for cap in caps:
        data[cap // 32].effective |= 1 << (cap % 32)
        data[cap // 32].permitted |= 1 << (cap % 32)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.capset(ctypes.byref(header), data) != 0:
        code = ctypes.get_errno()
        raise OSError(code, "capset: %s" % os.strerror(code))


def become_task_user(uid, gid):
    """Started as root with --user: from here on the agent acts as the task's user (see the top of this file).

    Its groups are what /etc/group gives the account (the task's account
    files, bound there by the executor). Only SETUID and SETGID are kept,
    for the children; the capabilities the entrypoint needed to give the
    workspace to the task go."""
    try:
        groups = os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except KeyError:
        groups = [gid]
    os.setgroups(groups)
    try:
        keep_capabilities(CAP_SETUID, CAP_SETGID)
    except Exception as err:
        log("cannot give up capabilities other than SETUID and SETGID: %s" % err)
    os.setegid(gid)
    os.seteuid(uid)
    return TaskUser(uid, gid, groups)


def parse_ids(text):
    """(uid, gid) from `UID:GID`, both positive; None when malformed."""
    uid, sep, gid = text.partition(":")
    if not sep or not uid.isdigit() or not gid.isdigit() or int(uid) == 0 or int(gid) == 0:
        return None
    return int(uid), int(gid)


def make_undumpable():
    """Commands run as our user; without this they could ptrace us or read our memory. Best effort."""
    try:
        import ctypes
        pr_set_dumpable = 4
        if ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
            log("prctl(PR_SET_DUMPABLE) failed: errno %d" % ctypes.get_errno())
    except Exception as err:
        log("cannot make the agent non-dumpable: %s" % err)


def survive_parent():
    """Stdio mode: the process that started us may be killed once our stream drops; we stay (best effort)."""
    try:
        import ctypes
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, 0, 0, 0, 0)
    except Exception as err:
        log("cannot clear the parent-death signal: %s" % err)
    # A handler, not SIG_IGN: an ignored signal stays ignored across exec, so every command would inherit it;
    # a handled one is back at its default in the program a command execs.
    signal.signal(signal.SIGHUP, _hangup_survived)


def _hangup_survived(_signum, _frame):
    """SIGHUP in stdio mode: the stream's end already tells the agent what it needs to know."""


def become_subreaper():
    """Orphans of commands become ours, and reap() collects them, as it does as PID 1 in a container.

    In stdio mode the agent is no container's PID 1 (under docker exec, ssh,
    apptainer), and a host's init may leave them as zombies for a while.
    Best effort.
    """
    try:
        import ctypes
        pr_set_child_subreaper = 36
        if ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0) != 0:
            log("prctl(PR_SET_CHILD_SUBREAPER) failed: errno %d" % ctypes.get_errno())
    except Exception as err:
        log("cannot become a subreaper: %s" % err)
