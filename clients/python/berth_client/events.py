"""Background-process events of a task: notify_on_complete completions,
watch-pattern matches (and their rate-limit summaries), heartbeats, as upstream
Hermes' process registry shapes them, with the text it puts into the
conversation.

Every event has an id. A client that reconnects with ``after=<last id seen>``
gets what it missed, as long as the server still keeps it (a task's last 100
events, for 30 minutes); when some are gone the stream starts with an
``events_dropped`` event that says so.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterator, Optional

import grpc

from ._gen import dispatcher_pb2 as pb
from .errors import UnavailableError, from_rpc_error

if TYPE_CHECKING:
    from .client import Berth


@dataclass(frozen=True)
class BackgroundEvent:
    """One event about a task's background processes (or an ``events_dropped`` / ``events_error`` note).

    ``type``: completion, watch_match, watch_disabled, heartbeat, watch_overflow_tripped,
    watch_overflow_released, events_dropped; ``events_error`` on a Session whose
    subscription failed or stopped (``text`` says why). ``event``: upstream's dict
    (session_id, command, output, ...), secrets masked. ``text``: what upstream
    puts into the conversation.
    """

    task_id: str
    id: str
    type: str
    event: Dict[str, Any] = field(compare=False)
    text: str
    kind = "event"

    @classmethod
    def from_pb(cls, message: Any) -> "BackgroundEvent":
        try:
            parsed = json.loads(message.event_json)
        except ValueError:
            parsed = {}
        return cls(message.task_id, message.id, message.type, parsed if isinstance(parsed, dict) else {}, message.text)


class EventStream:
    """The events of one task, in order: iterate it (a generator-style iterator), close() to stop.

    ``ready()`` blocks until the server has the subscription (nothing that
    happens afterwards is missed) and returns the newest id it keeps ("" for
    none). ``last_id`` is the id to reconnect with.
    """

    def __init__(self, berth: "Berth", task_id: str, after: str = "") -> None:
        self.task_id = task_id
        self.last_id = after
        self._ready: Optional[str] = None
        self._call = berth._stub.TaskEvents(pb.TaskEventsRequest(task_id=task_id, after=after), metadata=berth._metadata)
        self._closed = False

    def ready(self) -> str:
        """Waits for the server's answer to the subscription; returns the newest id it keeps."""
        while self._ready is None:
            message = self._next_message()
            if message is None:
                raise UnavailableError(grpc.StatusCode.UNAVAILABLE, "the event stream ended before the subscription was made")
            if message.WhichOneof("message") == "ready":
                self._ready = message.ready.last_id
        return self._ready

    def __iter__(self) -> Iterator[BackgroundEvent]:
        return self._events()

    def _events(self) -> Iterator[BackgroundEvent]:
        try:
            while True:
                message = self._next_message()
                if message is None:
                    return
                which = message.WhichOneof("message")
                if which == "ready":
                    self._ready = message.ready.last_id
                elif which == "event":
                    self.last_id = message.event.id
                    yield BackgroundEvent.from_pb(message.event)
        finally:
            self.close()

    def _next_message(self) -> Optional[Any]:
        try:
            return next(self._call)
        except StopIteration:
            return None
        except grpc.RpcError as err:
            if self._closed and err.code() == grpc.StatusCode.CANCELLED:
                return None
            raise from_rpc_error(err) from err

    def close(self) -> None:
        """Stops following; an iteration in progress ends."""
        self._closed = True
        self._call.cancel()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
