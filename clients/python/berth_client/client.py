"""The synchronous client: Berth (one channel to a dispatcher) and Task (the
calls of one task, whose environment keeps its cwd, files and processes)."""
from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from ._gen import dispatcher_pb2 as pb
from ._gen import dispatcher_pb2_grpc as pb_grpc
from .errors import from_rpc_error
from .events import EventStream
from .results import parse_result
from .session import Session
from .suspension import Suspension
from .snapshots import Snapshots
from .tools import ToolMethods

DEFAULT_ADDRESS = "127.0.0.1:7700"

Metadata = Tuple[Tuple[str, str], ...]


def _env_flag(value: Optional[str]) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


class Berth:
    """A connection to a Berth dispatcher.

    ``tls``: False for plain gRPC (loopback, or inside a cluster), True for TLS
    with the system's root certificates, or a ``grpc.ChannelCredentials``
    (e.g. ``grpc.ssl_channel_credentials(root_certificates=...)``).
    ``interactive=False`` tells the server nobody will answer approval requests
    for these calls, so they follow the tenant's ``approvals.non_interactive``.
    ``timeout`` (seconds) is the deadline of each unary call; None waits as long
    as the tool runs.
    """

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
            self._channel = grpc.insecure_channel(address, options=list(options))
        else:
            creds = grpc.ssl_channel_credentials() if tls is True else tls
            self._channel = grpc.secure_channel(address, creds, options=list(options))
        md: List[Tuple[str, str]] = []
        if api_key:
            md.append(("authorization", f"Bearer {api_key}"))
        if not interactive:
            md.append(("berth-interactive", "false"))
        self._metadata: Metadata = tuple(md)
        self._stub = pb_grpc.DispatcherStub(self._channel)
        self._sessions: List[Session] = []
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, **overrides: Any) -> "Berth":
        """A client configured like the berth CLI: BERTH_SERVER, BERTH_API_KEY, BERTH_TLS (1/true)."""
        kwargs: Dict[str, Any] = {
            "api_key": os.environ.get("BERTH_API_KEY") or None,
            "tls": _env_flag(os.environ.get("BERTH_TLS")),
        }
        kwargs.update(overrides)
        return cls(os.environ.get("BERTH_SERVER") or DEFAULT_ADDRESS, **kwargs)

    def task(self, task_id: str, session_id: str = "") -> "Task":
        """The task named task_id (created on its first call, kept until end())."""
        if not task_id:
            raise ValueError("task_id must not be empty")
        return Task(self, task_id, session_id)

    def list_tools(
        self, toolsets: Sequence[str] = (), disable: Sequence[str] = ()
    ) -> List[Dict[str, Any]]:
        """The OpenAI tool objects for the selected toolsets (all when none are given)."""
        response = self._unary(
            self._stub.ListTools, pb.ListToolsRequest(enabled_toolsets=list(toolsets), disabled_toolsets=list(disable))
        )
        tools: List[Dict[str, Any]] = json.loads(response.tools_json)
        return tools

    @property
    def snapshots(self) -> Snapshots:
        """Snapshots and forks of this tenant's tasks (docs/lifecycle.md)."""
        return Snapshots(self)

    def events(self, task_id: str, after: str = "") -> EventStream:
        """The task's background-process events: those the server keeps after ``after``
        (all of them by default), then new ones as they happen::

            for ev in berth.events("t1", after=last_seen):
                print(ev.text)

        On UNAVAILABLE (a restart) the iteration raises; reconnect with ``after=stream.last_id``.
        """
        return EventStream(self, task_id, after)

    def close(self) -> None:
        """Ends open sessions and closes the channel; calls still running are cancelled."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for s in sessions:
            s.close(wait=False)
        self._channel.close()

    def __enter__(self) -> "Berth":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_session(self, task_id: str, session_id: str) -> Session:
        session = Session(self, task_id, session_id)
        with self._lock:
            self._sessions = [s for s in self._sessions if s.open]
            self._sessions.append(session)
        return session

    def _unary(self, method: Any, request: Any, timeout: Optional[float] = None) -> Any:
        try:
            return method(request, metadata=self._metadata, timeout=timeout if timeout is not None else self.timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from err


class Task(ToolMethods[Dict[str, Any]]):
    """One task's calls. Each tool method returns the tool's parsed JSON result (a dict).

    A tool that fails returns a dict with "error" (what a model would read);
    only failures of Berth itself raise (see berth_client.errors).
    """

    def __init__(self, berth: Berth, task_id: str, session_id: str = "") -> None:
        self.berth = berth
        self.task_id = task_id
        self.session_id = session_id
        self._session: Optional[Session] = None

    def call(self, name: str, args: Optional[Mapping[str, Any]] = None, *, timeout: Optional[float] = None) -> Any:
        """Runs any tool by name; returns its parsed result."""
        return parse_result(self.call_json(name, args, timeout=timeout))

    def call_json(self, name: str, args: Optional[Mapping[str, Any]] = None, *, timeout: Optional[float] = None) -> str:
        """Runs any tool by name; returns its result string as the model would see it."""
        request = pb.CallToolRequest(
            name=name, arguments_json=json.dumps(dict(args or {})), task_id=self.task_id, session_id=self.session_id
        )
        response: pb.CallToolResponse = self.berth._unary(self.berth._stub.CallTool, request, timeout)
        return response.result_json

    def events(self, after: str = "") -> EventStream:
        """This task's background-process events (see Berth.events)."""
        return self.berth.events(self.task_id, after)

    def approve(self, approval_id: str, choice: str = "once") -> Any:
        """Answers a call that came back "pending_approval"; returns that call's result."""
        request = pb.ApproveRequest(
            task_id=self.task_id, session_id=self.session_id, approval_id=approval_id, choice=choice
        )
        response: pb.ApproveResponse = self.berth._unary(self.berth._stub.Approve, request)
        return parse_result(response.result_json)

    def interrupt(self) -> int:
        """Stops the task's running foreground calls; returns how many were interrupted."""
        response: pb.InterruptResponse = self.berth._unary(
            self.berth._stub.Interrupt, pb.InterruptRequest(task_id=self.task_id)
        )
        return int(response.interrupted)

    def end(self) -> bool:
        """Releases the task's environment (processes, container, files it owns). True if there was one."""
        if self._session is not None:
            self._session.close(wait=False)
            self._session = None
        response: pb.EndTaskResponse = self.berth._unary(self.berth._stub.EndTask, pb.EndTaskRequest(task_id=self.task_id))
        return bool(response.released)

    def suspend(self) -> Suspension:
        """Suspends the task's environment: no CPU, memory freed as far as the backend can; files and
        shell state are kept and the next call resumes it. Raises FAILED_PRECONDITION while a call runs
        on the task, or on a backend that cannot suspend."""
        response = self.berth._unary(self.berth._stub.Suspend, pb.SuspendRequest(task_id=self.task_id))
        return Suspension(suspended=bool(response.suspended), processes_kept=bool(response.processes_kept))

    def resume(self) -> bool:
        """Resumes the task's suspended environment now. False if it had none or was not suspended."""
        response = self.berth._unary(self.berth._stub.Resume, pb.ResumeRequest(task_id=self.task_id))
        return bool(response.resumed)

    def session(self) -> Session:
        """This task's Session stream (opened on first use, reopened after it ended)."""
        if self._session is None or not self._session.open:
            self._session = self.berth._open_session(self.task_id, self.session_id)
        return self._session
