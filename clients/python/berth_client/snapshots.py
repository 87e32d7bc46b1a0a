"""Snapshots and forks of tasks (docs/lifecycle.md), as ``berth.snapshots``::

    snap = berth.snapshots.create("base", label="deps installed")
    task = berth.snapshots.fork(snap.snapshot_id, "try-1")      # or fork_task("base", "try-2")
    print(task.terminal("pwd")["output"])                       # same files, cwd and variables as base had

and the same coroutines on ``AsyncBerth.snapshots`` (``await berth.snapshots.create("base")``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Tuple

from ._gen import dispatcher_pb2 as pb

if TYPE_CHECKING:
    from .aio import AsyncBerth, AsyncTask
    from .client import Berth, Task


@dataclass(frozen=True)
class Snapshot:
    """One snapshot, as the server lists it."""

    snapshot_id: str
    label: str
    source_task_id: str
    backend: str
    #: RFC 3339, UTC.
    created_at: str
    size_bytes: int
    #: True only when forks get the source's running processes back.
    includes_processes: bool
    #: What a fork gets: "files", "shell_state", and "processes" where includes_processes.
    includes: Tuple[str, ...]

    @classmethod
    def from_message(cls, m: "pb.SnapshotInfo") -> "Snapshot":
        return cls(
            snapshot_id=m.snapshot_id,
            label=m.label,
            source_task_id=m.source_task_id,
            backend=m.backend,
            created_at=m.created_at,
            size_bytes=int(m.size_bytes),
            includes_processes=bool(m.includes_processes),
            includes=tuple(m.includes),
        )


class Snapshots:
    """The tenant's snapshots on one dispatcher (``Berth.snapshots``)."""

    def __init__(self, berth: "Berth") -> None:
        self._berth = berth

    def create(self, task_id: str, label: str = "") -> Snapshot:
        """Snapshots the task (its files and shell state; processes only where the backend can)."""
        r: pb.SnapshotResponse = self._berth._unary(self._berth._stub.Snapshot, pb.SnapshotRequest(task_id=task_id, label=label))
        return Snapshot.from_message(r.snapshot)

    def fork(self, snapshot_id: str, task_id: str) -> "Task":
        """Makes task ``task_id`` from a snapshot; returns the new task."""
        return self._fork(pb.ForkRequest(snapshot_id=snapshot_id, task_id=task_id))[0]

    def fork_task(self, source_task_id: str, task_id: str, label: str = "") -> Tuple["Task", Snapshot]:
        """Makes task ``task_id`` from another task (a snapshot of it is taken first, kept, and returned)."""
        return self._fork(pb.ForkRequest(source_task_id=source_task_id, task_id=task_id, label=label))

    def list(self) -> List[Snapshot]:
        """The tenant's snapshots, newest first."""
        r: pb.ListSnapshotsResponse = self._berth._unary(self._berth._stub.ListSnapshots, pb.ListSnapshotsRequest())
        return [Snapshot.from_message(s) for s in r.snapshots]

    def delete(self, snapshot_id: str) -> bool:
        """Deletes a snapshot; forks made from it keep working. An unknown id raises NotFoundError."""
        r: pb.DeleteSnapshotResponse = self._berth._unary(
            self._berth._stub.DeleteSnapshot, pb.DeleteSnapshotRequest(snapshot_id=snapshot_id)
        )
        return bool(r.deleted)

    def _fork(self, request: "pb.ForkRequest") -> Tuple["Task", Snapshot]:
        r: pb.ForkResponse = self._berth._unary(self._berth._stub.Fork, request)
        return self._berth.task(r.task_id), Snapshot.from_message(r.snapshot)


class AsyncSnapshots:
    """``Snapshots`` for the asyncio client (``AsyncBerth.snapshots``): the same methods, as coroutines."""

    def __init__(self, berth: "AsyncBerth") -> None:
        self._berth = berth

    async def create(self, task_id: str, label: str = "") -> Snapshot:
        """See Snapshots.create."""
        r: pb.SnapshotResponse = await self._berth._unary(self._berth._stub.Snapshot, pb.SnapshotRequest(task_id=task_id, label=label))
        return Snapshot.from_message(r.snapshot)

    async def fork(self, snapshot_id: str, task_id: str) -> "AsyncTask":
        """See Snapshots.fork."""
        return (await self._fork(pb.ForkRequest(snapshot_id=snapshot_id, task_id=task_id)))[0]

    async def fork_task(self, source_task_id: str, task_id: str, label: str = "") -> Tuple["AsyncTask", Snapshot]:
        """See Snapshots.fork_task."""
        return await self._fork(pb.ForkRequest(source_task_id=source_task_id, task_id=task_id, label=label))

    async def list(self) -> List[Snapshot]:
        """See Snapshots.list."""
        r: pb.ListSnapshotsResponse = await self._berth._unary(self._berth._stub.ListSnapshots, pb.ListSnapshotsRequest())
        return [Snapshot.from_message(s) for s in r.snapshots]

    async def delete(self, snapshot_id: str) -> bool:
        """See Snapshots.delete."""
        r: pb.DeleteSnapshotResponse = await self._berth._unary(
            self._berth._stub.DeleteSnapshot, pb.DeleteSnapshotRequest(snapshot_id=snapshot_id)
        )
        return bool(r.deleted)

    async def _fork(self, request: "pb.ForkRequest") -> Tuple["AsyncTask", Snapshot]:
        r: pb.ForkResponse = await self._berth._unary(self._berth._stub.Fork, request)
        return self._berth.task(r.task_id), Snapshot.from_message(r.snapshot)
