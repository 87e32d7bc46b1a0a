"""The Session stream: tool calls with their streamed output and approval
requests, answered on the same stream.

One bidi gRPC stream carries any number of calls; a reader thread routes each
server message to the call it belongs to, so several threads may run calls on
one Session at once.
"""
from __future__ import annotations

import itertools
import json
import queue
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, Iterator, Mapping, Optional, Tuple, Union

import grpc

from ._gen import dispatcher_pb2 as pb
from .errors import BerthError, UnavailableError, error_for_name, from_rpc_error
from .events import BackgroundEvent
from .results import parse_result

if TYPE_CHECKING:
    from .client import Berth

#: The answers an approval request accepts.
CHOICES = ("once", "session", "always", "deny")


@dataclass(frozen=True)
class Output:
    """Output of a running call, as produced (may hold ANSI escapes); the result is authoritative."""

    call_id: str
    text: str
    kind: ClassVar[str] = "output"


@dataclass(frozen=True)
class ApprovalRequest:
    """The server asks whether a dangerous command may run; call answer() with one of `choices`."""

    approval_id: str
    call_id: str
    command: str
    description: str
    pattern_key: str
    choices: Tuple[str, ...]
    timeout_seconds: int
    # The Session or AsyncSession the request came on; both answer without blocking.
    _session: Any = field(repr=False, compare=False)
    kind: ClassVar[str] = "approval"

    def answer(self, choice: str) -> None:
        """Answers with once, session, always or deny. Silence until timeout_seconds denies."""
        self._session.answer(self.approval_id, choice, allowed=self.choices)


@dataclass(frozen=True)
class Result:
    """The call's final result. `result` is the parsed JSON (a dict for every built-in tool)."""

    call_id: str
    result_json: str
    kind: ClassVar[str] = "result"

    @property
    def result(self) -> Any:
        return parse_result(self.result_json)


Event = Union[Output, ApprovalRequest, Result]

# Put on a call's queue when the stream ends: the call will get no result.
_END = object()


class Session:
    """A Session stream for one task. Get it from Task.session(); close() (or `with`) ends it."""

    def __init__(self, berth: "Berth", task_id: str, session_id: str) -> None:
        self.task_id = task_id
        self.session_id = session_id
        self._requests: "queue.Queue[Optional[pb.SessionClientMessage]]" = queue.Queue()
        self._calls: Dict[str, "queue.Queue[Any]"] = {}
        self._background: "queue.Queue[Optional[BackgroundEvent]]" = queue.Queue()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._failure: Optional[BerthError] = None
        self._ended = False
        self._requests_closed = False
        self._responses = berth._stub.Session(self._outgoing(), metadata=berth._metadata)
        self._reader = threading.Thread(target=self._read, name=f"berth-session-{task_id}", daemon=True)
        self._reader.start()

    @property
    def open(self) -> bool:
        """False once the stream has ended (closed, failed, or the server went away)."""
        return not self._ended and not self._requests_closed

    def run(self, name: str, args: Optional[Mapping[str, Any]] = None, *, call_id: Optional[str] = None) -> Iterator[Event]:
        """Sends one tool call now; iterate for its Output and ApprovalRequest events, ending with its Result.

        A call that Berth itself could not run (the Result carries a gRPC status,
        or the stream failed) raises the matching BerthError instead of a Result.
        """
        cid = call_id or f"py-{next(self._ids)}"
        events: "queue.Queue[Any]" = queue.Queue()
        with self._lock:
            self._raise_if_unusable()
            if cid in self._calls:
                raise ValueError(f"call_id {cid!r} is already running on this session")
            self._calls[cid] = events
        request = pb.CallToolRequest(
            name=name, arguments_json=json.dumps(dict(args or {})), task_id=self.task_id, session_id=self.session_id
        )
        self._send(pb.SessionClientMessage(call=pb.SessionToolCall(call_id=cid, request=request)))
        return self._events(cid, events)

    def call(
        self,
        name: str,
        args: Optional[Mapping[str, Any]] = None,
        *,
        on_output: Optional[Callable[[str], None]] = None,
        on_approval: Optional[Callable[[ApprovalRequest], str]] = None,
    ) -> Any:
        """Runs one call to its end and returns the parsed result.

        on_approval gets each ApprovalRequest and returns the choice; without it
        a command that needs approval is denied.
        """
        for ev in self.run(name, args):
            if isinstance(ev, Output):
                if on_output is not None:
                    on_output(ev.text)
            elif isinstance(ev, ApprovalRequest):
                ev.answer(on_approval(ev) if on_approval is not None else "deny")
            else:
                return ev.result
        raise UnavailableError(grpc.StatusCode.UNAVAILABLE, "the Session stream ended before the call's result")

    def answer(self, approval_id: str, choice: str, *, allowed: Tuple[str, ...] = CHOICES) -> None:
        """Answers an approval request by id (ApprovalRequest.answer does this for you)."""
        if choice not in allowed:
            raise ValueError(f"choice must be one of {', '.join(allowed)}, not {choice!r}")
        self._send(pb.SessionClientMessage(approval_answer=pb.ApprovalAnswer(approval_id=approval_id, choice=choice)))

    def interrupt(self) -> None:
        """Stops the task's running foreground work; its calls end with their interrupted results."""
        self._send(pb.SessionClientMessage(interrupt=pb.InterruptRequest(task_id=self.task_id)))

    def set_yolo(self, enabled: bool = True) -> None:
        """Runs this session's commands without approval prompts (hardline blocks still apply).

        Needs a session_id. A tenant whose policy forbids it ends the stream
        with PERMISSION_DENIED, which the next call raises.
        """
        if not self.session_id:
            raise ValueError("set_yolo needs a session: create the task with session_id=...")
        self._send(pb.SessionClientMessage(settings=pb.SessionSettings(session_id=self.session_id, yolo=enabled)))

    def events(self, timeout: Optional[float] = None) -> Iterator[BackgroundEvent]:
        """Background-process events of the tasks this session follows, until the stream ends.

        The session follows its task from its first call; subscribe_events() to
        follow it from before that, or to resume after a reconnection. With
        ``timeout`` (seconds) the iteration also ends after that long without an event.
        """
        while True:
            try:
                ev = self._background.get(timeout=timeout)
            except queue.Empty:
                return
            if ev is None:
                self._background.put(None)
                return
            yield ev

    def subscribe_events(self, after: str = "") -> None:
        """Follows the task's events after ``after`` (the last id seen; "" for every event the server keeps)."""
        self._send(pb.SessionClientMessage(subscribe_events=pb.TaskEventsRequest(task_id=self.task_id, after=after)))

    def close(self, wait: bool = True) -> None:
        """Ends the request side; with wait, returns once running calls have finished and the stream ended."""
        with self._lock:
            if not self._requests_closed:
                self._requests_closed = True
                self._requests.put(None)
        if wait and threading.current_thread() is not self._reader:
            self._reader.join()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------

    def _raise_if_unusable(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._ended or self._requests_closed:
            raise UnavailableError(grpc.StatusCode.UNAVAILABLE, "this Session is closed: get a new one from Task.session()")

    def _send(self, message: pb.SessionClientMessage) -> None:
        with self._lock:
            self._raise_if_unusable()
            self._requests.put(message)

    def _outgoing(self) -> Iterator[pb.SessionClientMessage]:
        while True:
            message = self._requests.get()
            if message is None:
                return
            yield message

    def _events(self, call_id: str, events: "queue.Queue[Any]") -> Iterator[Event]:
        try:
            while True:
                ev = events.get()
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
            with self._lock:
                self._calls.pop(call_id, None)

    def _route(self, call_id: str, event: Any) -> None:
        with self._lock:
            target = self._calls.get(call_id)
        # Messages for a call whose iterator was abandoned are dropped.
        if target is not None:
            target.put(event)

    def _read(self) -> None:
        try:
            for message in self._responses:
                which = message.WhichOneof("message")
                if which == "event":
                    self._background.put(BackgroundEvent.from_pb(message.event))
                    continue
                if which == "events_ready":
                    if message.events_ready.error:
                        r = message.events_ready
                        self._background.put(BackgroundEvent(r.task_id, "", "events_error", {"error": r.error}, r.error))
                    continue
                routed = to_event(message, self)
                if routed is not None:
                    self._route(*routed)
        except grpc.RpcError as err:
            self._failure = from_rpc_error(err)
        finally:
            with self._lock:
                self._ended = True
                if not self._requests_closed:
                    # Lets the request iterator (a gRPC thread waiting on our queue) finish.
                    self._requests_closed = True
                    self._requests.put(None)
                pending = list(self._calls.values())
            self._background.put(None)
            for q in pending:
                q.put(_END)


def to_event(message: pb.SessionServerMessage, session: Any) -> Optional[Tuple[str, Any]]:
    """(call_id, what goes on that call's queue) for one server message.

    A result that carries a gRPC status (Berth could not run the call) goes
    as (Result, status) so the iterator raises instead of yielding it.
    """
    which = message.WhichOneof("message")
    if which == "output":
        return message.output.call_id, Output(message.output.call_id, message.output.text)
    if which == "approval_request":
        a = message.approval_request
        return a.call_id, ApprovalRequest(
            a.approval_id, a.call_id, a.command, a.description, a.pattern_key, tuple(a.choices), a.timeout_seconds, session
        )
    if which == "result":
        r = message.result
        result = Result(r.call_id, r.result_json)
        return r.call_id, ((result, r.error_status) if r.error_status else result)
    return None


def failed_call_error(result: Result, status: str) -> BerthError:
    """The exception for a Session result that carries a gRPC status name."""
    parsed = result.result
    details = parsed.get("error", result.result_json) if isinstance(parsed, dict) else result.result_json
    return error_for_name(status, str(details))
