"""The asyncio variant: the same calls as coroutines, the Session as an async iterator."""
import asyncio
import os
import shutil
import unittest

from berth_client import UnauthenticatedError
from berth_client.aio import AsyncBerth

from . import support


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.berth = AsyncBerth(support.server())
        self.task = self.berth.task(support.task_id("py-aio"), session_id="aio")
        self.dir = support.scratch_dir()

    async def asyncTearDown(self):
        await self.task.end()
        await self.berth.close()
        shutil.rmtree(self.dir, True)

    async def test_terminal_and_files(self):
        await self.task.terminal(f"cd {self.dir}")
        self.assertEqual((await self.task.terminal("pwd"))["output"], self.dir)
        path = os.path.join(self.dir, "a.txt")
        await self.task.write_file(path, "async\n")
        self.assertIn("1|async", (await self.task.read_file(path))["content"])

    async def test_events_as_an_async_generator(self):
        r = await self.task.terminal("echo aio-bg; exit 5", background=True, notify_on_complete=True)
        events = self.task.events()
        ev = await asyncio.wait_for(events.__anext__(), 60)
        await events.aclose()
        self.assertEqual(ev.type, "completion")
        self.assertEqual(ev.event["session_id"], r["session_id"])
        self.assertEqual(ev.event["exit_code"], 5)
        self.assertTrue(ev.text.startswith(f"[IMPORTANT: Background process {r['session_id']} exited (exit code 5)."), ev.text)

    async def test_session_approval_and_output(self):
        marker = os.path.join(self.dir, "aio-once")
        kinds = []
        result = None
        async for ev in self.task.session().run("terminal", {"command": f"bash -c 'touch {marker}; echo aio-ran'"}):
            kinds.append(ev.kind)
            if ev.kind == "approval":
                ev.answer("once")
            elif ev.kind == "result":
                result = ev.result
        self.assertEqual(kinds[0], "approval")
        self.assertIn("output", kinds)
        self.assertEqual(result["output"], "aio-ran")
        self.assertTrue(os.path.exists(marker))

    async def test_interrupt_while_a_call_runs(self):
        running = asyncio.ensure_future(self.task.terminal("sleep 60"))
        interrupted = 0
        for _ in range(600):
            interrupted = await self.task.interrupt()
            if interrupted:
                break
            await asyncio.sleep(0.05)
        result = await asyncio.wait_for(running, 30)
        self.assertEqual(interrupted, 1)
        self.assertEqual(result["exit_code"], 130)

    async def test_unknown_key_raises_unauthenticated(self):
        async with AsyncBerth(support.tenant_server(), api_key="not-a-key") as b:
            with self.assertRaises(UnauthenticatedError):
                await b.task("t").terminal("true")
            with self.assertRaises(UnauthenticatedError):
                async for _ in b.task("t").session().run("terminal", {"command": "true"}):
                    pass


if __name__ == "__main__":
    unittest.main()
