"""The cgroup counters reported with every exit, so the executor can tell that a limit of the container
(memory, pids) hit the command."""

# Name -> (files, line key).
COUNTERS = {
    "oom_kill": (("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"), "oom_kill"),
    "pids_max": (("/sys/fs/cgroup/pids.events", "/sys/fs/cgroup/pids/pids.events"), "max"),
}


def read_counter(path, key):
    try:
        with open(path, "rb") as f:
            for line in f.read().decode("ascii", "replace").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
                    return int(parts[1])
    except OSError:
        pass
    return None


def find_counters():
    """The first readable file of each counter (cgroup v2, then v1)."""
    found = {}
    for name, (paths, key) in COUNTERS.items():
        for path in paths:
            if read_counter(path, key) is not None:
                found[name] = (path, key)
                break
    return found
