"""Python client for Berth, the gRPC service that runs AI agents' tool calls in sandboxes.

    from berth_client import Berth
    with Berth("127.0.0.1:7700", api_key=...) as b:
        t = b.task("t1")
        print(t.terminal("pwd")["output"])
"""
from .client import DEFAULT_ADDRESS, Berth, Task
from .errors import (
    ERRORS_BY_CODE,
    AbortedError,
    BerthError,
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from .events import BackgroundEvent, EventStream
from .session import CHOICES, ApprovalRequest, Event, Output, Result, Session
from .suspension import Suspension
from .snapshots import Snapshot, Snapshots

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ADDRESS", "Berth", "Task", "Session", "Event", "BackgroundEvent", "EventStream", "Output", "ApprovalRequest", "Result", "CHOICES", "Snapshot", "Snapshots",
    "ERRORS_BY_CODE", "BerthError", "InvalidArgumentError", "NotFoundError", "FailedPreconditionError",
    "ResourceExhaustedError", "DeadlineExceededError", "UnavailableError", "PermissionDeniedError",
    "UnauthenticatedError", "AbortedError", "CancelledError", "Suspension",
]
