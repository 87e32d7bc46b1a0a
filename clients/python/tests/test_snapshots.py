"""berth.snapshots against the test server, whose backend (local) takes no snapshots: every call says so."""
import unittest

from berth_client import Berth, FailedPreconditionError, Snapshot
from berth_client.aio import AsyncBerth

from .support import server, task_id

REFUSAL = "the local backend cannot snapshot or fork tasks"


class SnapshotsTest(unittest.TestCase):
    def setUp(self):
        self.berth = Berth(server(), interactive=False)
        self.addCleanup(self.berth.close)

    def test_snapshot_of_a_task_is_refused_naming_the_backend(self):
        task = self.berth.task(task_id("py-snap"))
        self.addCleanup(task.end)
        self.assertEqual(task.terminal("true")["exit_code"], 0)
        with self.assertRaises(FailedPreconditionError) as caught:
            self.berth.snapshots.create(task.task_id, label="x")
        self.assertIn(REFUSAL, str(caught.exception))
        self.assertIn("use the docker backend", str(caught.exception))

    def test_fork_list_and_delete_are_refused_too(self):
        unknown = "snap_" + "0" * 24
        for call in (
            lambda: self.berth.snapshots.fork(unknown, task_id("py-fork")),
            lambda: self.berth.snapshots.fork_task(task_id("py-src"), task_id("py-fork")),
            self.berth.snapshots.list,
            lambda: self.berth.snapshots.delete(unknown),
        ):
            with self.assertRaises(FailedPreconditionError) as caught:
                call()
            self.assertIn(REFUSAL, str(caught.exception))

    def test_snapshot_fields_from_the_message(self):
        from berth_client._gen import dispatcher_pb2 as pb

        m = pb.SnapshotInfo(snapshot_id="snap_" + "1" * 24, label="l", source_task_id="t", backend="docker",
                            created_at="2026-01-01T00:00:00.000Z", size_bytes=5, includes=["files", "shell_state"])
        s = Snapshot.from_message(m)
        self.assertEqual((s.snapshot_id, s.size_bytes, s.includes_processes, s.includes), (m.snapshot_id, 5, False, ("files", "shell_state")))


class AsyncSnapshotsTest(unittest.IsolatedAsyncioTestCase):
    """The asyncio client's snapshots reach the same RPCs: the same refusals, as coroutines."""

    async def asyncSetUp(self):
        self.berth = AsyncBerth(server(), interactive=False)

    async def asyncTearDown(self):
        await self.berth.close()

    async def test_every_call_is_refused_naming_the_backend(self):
        task = self.berth.task(task_id("py-aio-snap"))
        try:
            self.assertEqual((await task.terminal("true"))["exit_code"], 0)
            unknown = "snap_" + "0" * 24
            for call in (
                lambda: self.berth.snapshots.create(task.task_id, label="x"),
                lambda: self.berth.snapshots.fork(unknown, task_id("py-aio-fork")),
                lambda: self.berth.snapshots.fork_task(task.task_id, task_id("py-aio-fork")),
                self.berth.snapshots.list,
                lambda: self.berth.snapshots.delete(unknown),
            ):
                with self.assertRaises(FailedPreconditionError) as caught:
                    await call()
                self.assertIn(REFUSAL, str(caught.exception))
        finally:
            await task.end()


if __name__ == "__main__":
    unittest.main()
