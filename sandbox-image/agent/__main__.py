"""The entry point of the agent's archive (berth_agent.pyz): `python3 -I -S berth_agent.pyz ...`.

The archive itself is sys.path[0], so the package comes from it and from
nowhere a command could write (see berth_agent/__init__.py). This file is
written in syntax any Python parses, and checks the version before anything
of the package is imported, so an interpreter too old for the agent says so
(exit status 4, a line the executor matches) instead of failing on it.
Then it checks that the package it got is this archive's own (exit status 6
otherwise): a package of the same name imported ahead of it is not the
agent, whatever it says in its hello.
"""
import os
import sys

# The oldest Python the agent is written for (and tested against the syntax of).
MIN_PYTHON = (3, 8)

if sys.version_info[:2] < MIN_PYTHON:
    # The executor matches this line to tell "python too old" from other failures.
    sys.stderr.write("berth-agent: python %d.%d or newer required, this is %d.%d\n" % (MIN_PYTHON + tuple(sys.version_info[:2])))
    sys.exit(4)

import berth_agent  # noqa: E402 (after the version check, on purpose)

archive = os.path.abspath(os.path.dirname(__file__))
origin = os.path.abspath(os.path.dirname(os.path.dirname(getattr(berth_agent, "__file__", None) or "?/?")))
if origin != archive:
    sys.stderr.write("berth-agent: its package was imported from %s, not from its archive %s; not starting\n" % (origin, archive))
    sys.exit(6)

from berth_agent.main import main  # noqa: E402

sys.exit(main())
