#!/usr/bin/env python3
"""Builds the agent's archive: `python3 build.py OUT [SOURCE_DIR]`.

One zip file (a zipapp: `python3 OUT ...` runs its __main__.py) holding
__main__.py and the berth_agent package from SOURCE_DIR (default: this
file's directory). Deterministic, so its hash names one agent wherever it was
built: entries sorted, every timestamp 1980-01-01, mode 0644, stored
uncompressed (a deflater's output may differ between zlib versions). Nothing
else goes in (no tests, no __pycache__). Standard library only.
"""
import os
import sys
import zipfile

FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def sources(root):
    """Archive names of what goes in: __main__.py and every .py under berth_agent/, sorted."""
    names = ["__main__.py"]
    for directory, subdirs, files in os.walk(os.path.join(root, "berth_agent")):
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                names.append(os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/"))
    return sorted(names)


def build(out, root):
    temp = "%s.tmp-%d" % (out, os.getpid())
    try:
        with zipfile.ZipFile(temp, "w", zipfile.ZIP_STORED) as archive:
            for name in sources(root):
                with open(os.path.join(root, name), "rb") as f:
                    data = f.read()
                info = zipfile.ZipInfo(name, FIXED_TIME)
                info.external_attr = 0o100644 << 16
                info.create_system = 3  # Unix, whatever the build host
                archive.writestr(info, data)
        os.chmod(temp, 0o644)
        os.replace(temp, out)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def main(argv):
    if len(argv) not in (1, 2):
        sys.stderr.write("usage: build.py OUT [SOURCE_DIR]\n")
        return 2
    out = argv[0]
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    if os.path.dirname(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
    build(out, root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
