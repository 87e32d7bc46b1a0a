"""The task's user (`--user UID:GID`): the agent started as root acts as the task's user, keeps only the two
capabilities its spawns need, and every command runs with the task's ids and no way back; an agent that cannot
switch never runs a command at all."""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import unittest

from berth_agent.taskuser import TaskUser, parse_ids

from .agent_process import AgentProcess, listening_socket
from .support import build_archive

# The task's ids in these tests: nobody's, which exist on any Linux.
TASK_UID = TASK_GID = 65534
IS_ROOT = os.geteuid() == 0
NEEDS_ROOT = "starting an agent with --user needs root (run the tests as root, as CI does)"


def status_fields(pid, *names):
    """Lines of /proc/PID/status by name, their values as the kernel writes them (tab-separated)."""
    with open("/proc/%d/status" % pid) as f:
        lines = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    return [lines[name] for name in names]


def open_directory(case):
    """A temp directory every user may enter (the run's own temp directory may be private to its user)."""
    path = tempfile.mkdtemp(prefix="berth-agent-test-", dir="/tmp")
    case.addCleanup(shutil.rmtree, path, True)
    os.chmod(path, 0o755)
    return path


def python_for(user):
    """A Python `user` may run: this one, else the system's (this one may live in root's home)."""
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            if subprocess.run([python, "-c", ""], user=user, stderr=subprocess.DEVNULL).returncode == 0:
                return python
        except PermissionError:
            pass
    raise AssertionError("no Python that uid %s may run" % user)


class Ids(unittest.TestCase):
    def test_uid_and_gid_are_read_positive_and_never_root(self):
        self.assertEqual(parse_ids("1000:1001"), (1000, 1001))
        for text in ("0:1000", "1000:0", "1000", "1000:", ":1000", "-1:5", "a:1", "1000:1000:1", ""):
            self.assertIsNone(parse_ids(text), text)

    def test_children_are_started_with_the_tasks_ids_and_groups(self):
        self.assertEqual(TaskUser(1000, 1001, [1001, 27]).popen_ids(), {"user": 1000, "group": 1001, "extra_groups": [1001, 27]})


class Refusal(unittest.TestCase):
    def test_an_agent_that_cannot_become_the_task_user_exits_before_its_hello(self):
        # Not root (as root: run as nobody), it cannot switch to another user; it must not go on as itself.
        directory = open_directory(self)
        path = os.path.join(directory, "agent.sock")
        listener = listening_socket(self, path)
        os.chmod(path, 0o777)
        token = os.path.join(directory, "agent-token")
        with open(token, "w") as f:
            f.write("tok")
        os.chmod(token, 0o644)
        user = TASK_UID if IS_ROOT else None
        other = "1000:1000" if (TASK_UID if IS_ROOT else os.geteuid()) != 1000 else "1001:1001"
        # The archive, in a directory the agent's user can read (the checkout may not be), and an interpreter it may run.
        archive = build_archive(directory)
        agent = subprocess.Popen([python_for(user), "-I", "-S", archive, "--user", other, path, token],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, user=user)
        self.addCleanup(agent.stderr.close)
        listener.settimeout(10)
        conn, _ = listener.accept()
        self.addCleanup(conn.close)
        conn.settimeout(10)
        self.assertEqual(conn.recv(100), b"", "the agent said something before switching users")
        self.assertEqual(agent.wait(10), 5)
        self.assertIn("berth-agent: cannot act as the task's user %s: " % other, agent.stderr.read().decode())


@unittest.skipUnless(IS_ROOT, NEEDS_ROOT)
class AsTheTaskUser(unittest.TestCase):
    def setUp(self):
        self.dir = open_directory(self)
        self.token = os.path.join(self.dir, "agent-token")
        with open(self.token, "w") as f:
            f.write("the-token\n")
        path = os.path.join(self.dir, "agent.sock")
        listener = listening_socket(self, path)
        self.agent = AgentProcess(self, args=("--user", "%d:%d" % (TASK_UID, TASK_GID), path, self.token),
                                  listen=listener)

    def test_the_agent_dialled_as_root_and_took_its_token_away(self):
        self.assertEqual(self.agent.hello["token"], "the-token")
        self.assertFalse(os.path.exists(self.token))
        self.assertIn("task-user", self.agent.hello["capabilities"])

    def test_the_agent_acts_as_the_task_user_keeping_only_setuid_and_setgid(self):
        uid, gid, permitted, effective = status_fields(self.agent.proc.pid, "Uid", "Gid", "CapPrm", "CapEff")
        # Real, effective, saved, filesystem: root only where a spawn needs it back.
        self.assertEqual(uid.split(), ["0", str(TASK_UID), "0", str(TASK_UID)])
        self.assertEqual(gid.split()[1], str(TASK_GID))
        self.assertEqual(int(permitted, 16), (1 << 6) | (1 << 7))
        self.assertEqual(int(effective, 16), 0)

    def test_a_command_has_the_tasks_ids_groups_and_no_capability_and_no_way_back(self):
        groups = sorted(os.getgrouplist(pwd.getpwuid(TASK_UID).pw_name, TASK_GID))
        output, exit_header = self.agent.run(1, "grep -E '^(Uid|Gid|Groups|CapPrm|CapEff):' /proc/$$/status")
        self.assertEqual(exit_header["code"], 0, output)
        self.assertEqual(output.decode().splitlines(), [
            "Uid:\t%d\t%d\t%d\t%d" % ((TASK_UID,) * 4),
            "Gid:\t%d\t%d\t%d\t%d" % ((TASK_GID,) * 4),
            "Groups:\t%s" % "".join("%d " % g for g in groups),
            "CapPrm:\t0000000000000000",
            "CapEff:\t0000000000000000",
        ])

    def test_a_command_on_a_terminal_runs_as_the_task_user_too(self):
        output, _ = self.agent.run(1, "id -u; id -g", pty=True)
        self.assertEqual(output, b"%d\r\n%d\r\n" % (TASK_UID, TASK_GID))

    def test_a_directory_private_to_the_task_is_entered_and_one_private_to_root_refused(self):
        mine = os.path.join(self.dir, "mine")
        os.mkdir(mine, 0o700)
        os.chown(mine, TASK_UID, TASK_GID)
        for req_id in (1, 2):  # a bash started for it, then the one started ahead in that directory
            output, _ = self.agent.run(req_id, "pwd", cwd=mine)
            self.assertEqual(output, mine.encode() + b"\n")
        roots = os.path.join(self.dir, "roots")
        os.mkdir(roots, 0o700)
        refused = self.agent.request({"op": "spawn", "id": 3, "script": "pwd", "cwd": roots})
        self.assertEqual((refused["op"], refused["errno"], refused["message"]),
                         ("error", "EACCES", "cannot start bash: Permission denied"))


if __name__ == "__main__":
    unittest.main()
