"""What Task.suspend() answers (docs/suspend.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Suspension:
    """suspended: False when the task had no environment (or was suspended already).
    processes_kept: False when its background processes ended with the suspension."""

    suspended: bool
    processes_kept: bool
