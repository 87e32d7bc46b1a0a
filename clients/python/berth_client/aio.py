"""The asyncio client, on grpc.aio: AsyncBerth, AsyncTask and AsyncSession
mirror Berth, Task and Session, with coroutines and async iterators.

    from berth_client.aio import AsyncBerth
    async with AsyncBerth("127.0.0.1:7700") as b:
        t = b.task("t1")
        print((await t.terminal("pwd"))["output"])
        async for ev in t.session().run("terminal", {"command": "make"}):
            if ev.kind == "approval":
                ev.answer("once")
"""
from __future__ import annotations

import asyncio
import itertools
import json
import os
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

from ._gen import dispatcher_pb2 as pb
from ._gen import dispatcher_pb2_grpc as pb_grpc
from .client import DEFAULT_ADDRESS, _env_flag
from .errors import BerthError, CancelledError, UnavailableError, from_rpc_error
from .events import BackgroundEvent
from .results import parse_result
from .session import CHOICES, ApprovalRequest, Event, Output, Result, failed_call_error, to_event
from .snapshots import AsyncSnapshots
from .suspension import Suspension
from .tools import ToolMethods

_END = object()


class AsyncBerth:
    """A grpc.aio connection to a Berth dispatcher; options as for Berth."""

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        api_key: Optional[str] = None,
        tls: Union[bool, grpc.ChannelCredentials] = False,
        interactive: bool = True,
        timeout: Optional[float] = None,
        options: Sequence[Tuple[str, Any]] = (),
    ) -> None:
        self.address = address
        self.timeout = timeout
        if tls is False:
            self._channel = grpc.aio.insecure_channel(address, options=list(options))
        else:
            creds = grpc.ssl_channel_credentials() if tls is True else tls
            self._channel = grpc.aio.secure_channel(address, creds, options=list(options))
        md: List[Tuple[str, str]] = []
        if api_key:
            md.append(("authorization", f"Bearer {api_key}"))
        if not interactive:
            md.append(("berth-interactive", "false"))
        self._metadata = tuple(md)
        self._stub = pb_grpc.DispatcherStub(self._channel)
        self._sessions: List[AsyncSession] = []

    @classmethod
    def from_env(cls, **overrides: Any) -> "AsyncBerth":
        """Configured like the berth CLI: BERTH_SERVER, BERTH_API_KEY, BERTH_TLS (1/true)."""
        kwargs: Dict[str, Any] = {
            "api_key": os.environ.get("BERTH_API_KEY") or None,
            "tls": _env_flag(os.environ.get("BERTH_TLS")),
        }
        kwargs.update(overrides)
        return cls(os.environ.get("BERTH_SERVER") or DEFAULT_ADDRESS, **kwargs)

    @property
    def snapshots(self) -> AsyncSnapshots:
        """The tenant's snapshots: create, fork, fork_task, list, delete (docs/lifecycle.md)."""
        return AsyncSnapshots(self)

    def task(self, task_id: str, session_id: str = "") -> "AsyncTask":
        if not task_id:
            raise ValueError("task_id must not be empty")
        return AsyncTask(self, task_id, session_id)

    async def list_tools(self, toolsets: Sequence[str] = (), disable: Sequence[str] = ()) -> List[Dict[str, Any]]:
        response = await self._unary(
            self._stub.ListTools, pb.ListToolsRequest(enabled_toolsets=list(toolsets), disabled_toolsets=list(disable))
        )
        tools: List[Dict[str, Any]] = json.loads(response.tools_json)
        return tools

    async def events(self, task_id: str, after: str = "") -> AsyncIterator[BackgroundEvent]:
        """The task's background-process events (as Berth.events), as an async generator::

            async for ev in berth.events("t1", after=last_seen):
                print(ev.text)

        On UNAVAILABLE it raises; reconnect with ``after=`` the last ``ev.id`` seen.
        """
        call = self._stub.TaskEvents(pb.TaskEventsRequest(task_id=task_id, after=after), metadata=self._metadata)
        try:
            async for message in call:
                if message.WhichOneof("message") == "event":
                    yield BackgroundEvent.from_pb(message.event)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err
        finally:
            call.cancel()

    async def close(self) -> None:
        """Ends open sessions and closes the channel; calls still running are cancelled."""
        sessions, self._sessions = self._sessions, []
        for s in sessions:
            s.close_requests()
        await self._channel.close()
        for s in sessions:
            await s.wait_closed()

    async def __aenter__(self) -> "AsyncBerth":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _open_session(self, task_id: str, session_id: str) -> "AsyncSession":
        session = AsyncSession(self, task_id, session_id)
        self._sessions = [s for s in self._sessions if s.open]
        self._sessions.append(session)
        return session

    async def _unary(self, method: Any, request: Any, timeout: Optional[float] = None) -> Any:
        try:
            return await method(request, metadata=self._metadata, timeout=timeout if timeout is not None else self.timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err


class AsyncTask(ToolMethods[Awaitable[Dict[str, Any]]]):
    """One task's calls, as coroutines; see Task."""

    def __init__(self, berth: AsyncBerth, task_id: str, session_id: str = "") -> None:
        self.berth = berth
        self.task_id = task_id
        self.session_id = session_id
        self._session: Optional[AsyncSession] = None

    async def call(self, name: str, args: Optional[Mapping[str, Any]] = None, *, timeout: Optional[float] = None) -> Any:
        return parse_result(await self.call_json(name, args, timeout=timeout))

    async def call_json(self, name: str, args: Optional[Mapping[str, Any]] = None, *, timeout: Optional[float] = None) -> str:
        request = pb.CallToolRequest(
            name=name, arguments_json=json.dumps(dict(args or {})), task_id=self.task_id, session_id=self.session_id
        )
        response = await self.berth._unary(self.berth._stub.CallTool, request, timeout)
        return str(response.result_json)

    def events(self, after: str = "") -> AsyncIterator[BackgroundEvent]:
        """This task's background-process events (see AsyncBerth.events)."""
        return self.berth.events(self.task_id, after)

    async def approve(self, approval_id: str, choice: str = "once") -> Any:
        request = pb.ApproveRequest(task_id=self.task_id, session_id=self.session_id, approval_id=approval_id, choice=choice)
        return parse_result((await self.berth._unary(self.berth._stub.Approve, request)).result_json)

    async def interrupt(self) -> int:
        response = await self.berth._unary(self.berth._stub.Interrupt, pb.InterruptRequest(task_id=self.task_id))
        return int(response.interrupted)

    async def end(self) -> bool:
        if self._session is not None:
            self._session.close_requests()
            self._session = None
        response = await self.berth._unary(self.berth._stub.EndTask, pb.EndTaskRequest(task_id=self.task_id))
        return bool(response.released)

    async def suspend(self) -> Suspension:
        """See Task.suspend."""
        response = await self.berth._unary(self.berth._stub.Suspend, pb.SuspendRequest(task_id=self.task_id))
        return Suspension(suspended=bool(response.suspended), processes_kept=bool(response.processes_kept))

    async def resume(self) -> bool:
        """See Task.resume."""
        response = await self.berth._unary(self.berth._stub.Resume, pb.ResumeRequest(task_id=self.task_id))
        return bool(response.resumed)

    def session(self) -> "AsyncSession":
        """This task's Session stream (opened on first use, reopened after it ended). Needs a running loop."""
        if self._session is None or not self._session.open:
            self._session = self.berth._open_session(self.task_id, self.session_id)
        return self._session


class AsyncSession:
    """The Session stream for one task under asyncio; see Session. answer() and interrupt() do not block."""

    def __init__(self, berth: AsyncBerth, task_id: str, session_id: str) -> None:
        self.task_id = task_id
        self.session_id = session_id
        self._requests: "asyncio.Queue[Optional[pb.SessionClientMessage]]" = asyncio.Queue()
        self._calls: Dict[str, "asyncio.Queue[Any]"] = {}
        self._ids = itertools.count(1)
        self._failure: Optional[BerthError] = None
        self._ended = False
        self._requests_closed = False
        self._stream = berth._stub.Session(self._outgoing(), metadata=berth._metadata)
        self._reader = asyncio.ensure_future(self._read())

    @property
    def open(self) -> bool:
        return not self._ended and not self._requests_closed

    def run(self, name: str, args: Optional[Mapping[str, Any]] = None, *, call_id: Optional[str] = None) -> AsyncIterator[Event]:
        """Sends one tool call now; async-iterate for its events, ending with its Result (see Session.run)."""
        self._raise_if_unusable()
        cid = call_id or f"py-{next(self._ids)}"
        if cid in self._calls:
            raise ValueError(f"call_id {cid!r} is already running on this session")
        events: "asyncio.Queue[Any]" = asyncio.Queue()
        self._calls[cid] = events
        request = pb.CallToolRequest(
            name=name, arguments_json=json.dumps(dict(args or {})), task_id=self.task_id, session_id=self.session_id
        )
        self._send(pb.SessionClientMessage(call=pb.SessionToolCall(call_id=cid, request=request)))
        return self._events(cid, events)

    async def call(
        self,
        name: str,
        args: Optional[Mapping[str, Any]] = None,
        *,
        on_output: Optional[Callable[[str], None]] = None,
        on_approval: Optional[Callable[[ApprovalRequest], str]] = None,
    ) -> Any:
        """Runs one call to its end; returns the parsed result. Without on_approval, approvals are denied."""
        async for ev in self.run(name, args):
            if isinstance(ev, Output):
                if on_output is not None:
                    on_output(ev.text)
            elif isinstance(ev, ApprovalRequest):
                ev.answer(on_approval(ev) if on_approval is not None else "deny")
            else:
                return ev.result
        raise UnavailableError(grpc.StatusCode.UNAVAILABLE, "the Session stream ended before the call's result")

    def answer(self, approval_id: str, choice: str, *, allowed: Tuple[str, ...] = CHOICES) -> None:
        if choice not in allowed:
            raise ValueError(f"choice must be one of {', '.join(allowed)}, not {choice!r}")
        self._send(pb.SessionClientMessage(approval_answer=pb.ApprovalAnswer(approval_id=approval_id, choice=choice)))

    def interrupt(self) -> None:
        self._send(pb.SessionClientMessage(interrupt=pb.InterruptRequest(task_id=self.task_id)))

    def set_yolo(self, enabled: bool = True) -> None:
        if not self.session_id:
            raise ValueError("set_yolo needs a session: create the task with session_id=...")
        self._send(pb.SessionClientMessage(settings=pb.SessionSettings(session_id=self.session_id, yolo=enabled)))

    def close_requests(self) -> None:
        """Ends the request side; running calls finish, then the stream ends."""
        if not self._requests_closed:
            self._requests_closed = True
            self._requests.put_nowait(None)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._reader)

    async def close(self) -> None:
        """Ends the request side and waits until running calls have finished and the stream ended."""
        self.close_requests()
        await self.wait_closed()

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _raise_if_unusable(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._ended or self._requests_closed:
            raise UnavailableError(grpc.StatusCode.UNAVAILABLE, "this Session is closed: get a new one from AsyncTask.session()")

    def _send(self, message: pb.SessionClientMessage) -> None:
        self._raise_if_unusable()
        self._requests.put_nowait(message)

    async def _outgoing(self) -> AsyncIterator[pb.SessionClientMessage]:
        while True:
            message = await self._requests.get()
            if message is None:
                return
            yield message

    async def _events(self, call_id: str, events: "asyncio.Queue[Any]") -> AsyncIterator[Event]:
        try:
            while True:
                ev = await events.get()
                if ev is _END:
                    raise self._failure or UnavailableError(
                        grpc.StatusCode.UNAVAILABLE, "the Session stream ended before the call's result"
                    )
                if isinstance(ev, tuple):
                    raise failed_call_error(*ev)
                yield ev
                if isinstance(ev, Result):
                    return
        finally:
            self._calls.pop(call_id, None)

    async def _read(self) -> None:
        try:
            async for message in self._stream:
                routed = to_event(message, self)
                if routed is not None and routed[0] in self._calls:
                    self._calls[routed[0]].put_nowait(routed[1])
        except grpc.RpcError as err:
            self._failure = from_rpc_error(err)
        except asyncio.CancelledError:
            self._failure = CancelledError(grpc.StatusCode.CANCELLED, "the channel was closed")
        finally:
            self._ended = True
            if not self._requests_closed:
                self._requests_closed = True
                self._requests.put_nowait(None)
            for q in list(self._calls.values()):
                q.put_nowait(_END)
