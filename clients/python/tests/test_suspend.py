"""Task.suspend() and Task.resume(), sync and asyncio, against berth serve (local backend, which cannot suspend:
the refusal names it; the docker backend's suspension is tested in the e2e suite)."""
import unittest

from berth_client import Berth, FailedPreconditionError
from berth_client.aio import AsyncBerth

from . import support


class SuspendTest(unittest.TestCase):
    def setUp(self):
        self.berth = Berth(support.server())
        self.task = self.berth.task(support.task_id("py-suspend"))

    def tearDown(self):
        self.task.end()
        self.berth.close()

    def test_a_backend_that_cannot_suspend_refuses_naming_itself(self):
        self.task.terminal("true")
        for call in (self.task.suspend, self.task.resume):
            with self.assertRaises(FailedPreconditionError) as caught:
                call()
            self.assertIn("the local backend cannot suspend", str(caught.exception))


class AsyncSuspendTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.berth = AsyncBerth(support.server())
        self.task = self.berth.task(support.task_id("py-aio-suspend"))

    async def asyncTearDown(self):
        await self.task.end()
        await self.berth.close()

    async def test_a_backend_that_cannot_suspend_refuses_naming_itself(self):
        await self.task.terminal("true")
        with self.assertRaises(FailedPreconditionError) as caught:
            await self.task.suspend()
        self.assertIn("the local backend cannot suspend", str(caught.exception))
