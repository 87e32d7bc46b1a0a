"""Failures of Berth itself, as Python exceptions chosen by gRPC status code.

A tool that fails is not an exception: its result is a dict with an "error"
key, which is what a model reads. These exceptions are for calls that Berth
could not run at all (bad API key, server unreachable, bad request).
"""
from __future__ import annotations

from typing import Dict, Optional, Type

import grpc


class BerthError(Exception):
    """A call Berth refused or could not complete; `code` is the gRPC status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class InvalidArgumentError(BerthError):
    """The request is malformed (missing field, bad JSON arguments, unknown choice)."""


class NotFoundError(BerthError):
    """What the request names does not exist (e.g. an approval that was already answered)."""


class FailedPreconditionError(BerthError):
    """The server is not in a state to run this (e.g. the backend is not available)."""


class ResourceExhaustedError(BerthError):
    """A quota or limit was reached; retry later or raise the limit."""


class DeadlineExceededError(BerthError, TimeoutError):
    """The call's deadline passed before the server answered."""


class UnavailableError(BerthError, ConnectionError):
    """The server or its executor cannot be reached, or is shutting down; retry."""


class PermissionDeniedError(BerthError):
    """The tenant's policy forbids this (e.g. yolo mode)."""


class UnauthenticatedError(BerthError):
    """The API key is missing or unknown."""


class AbortedError(BerthError):
    """The call was cut off, e.g. its connection reset; retry if it is idempotent."""


class CancelledError(BerthError):
    """The call was cancelled (by the client, or by an interrupt)."""


#: gRPC status -> exception class. Codes not listed raise BerthError itself.
ERRORS_BY_CODE: Dict[grpc.StatusCode, Type[BerthError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.CANCELLED: CancelledError,
}


def error_for(code: grpc.StatusCode, details: str) -> BerthError:
    """The exception for a status code and its message."""
    return ERRORS_BY_CODE.get(code, BerthError)(code, details)


def error_for_name(status_name: str, details: str) -> BerthError:
    """The exception for a status given by name (as Session results carry it, e.g. "UNAVAILABLE")."""
    code = getattr(grpc.StatusCode, status_name, grpc.StatusCode.UNKNOWN)
    return error_for(code, details)


def from_rpc_error(err: grpc.RpcError) -> BerthError:
    """A grpc.RpcError (which is also a grpc.Call) as the matching BerthError."""
    code: Optional[grpc.StatusCode] = getattr(err, "code", lambda: None)()
    details: Optional[str] = getattr(err, "details", lambda: None)()
    return error_for(code or grpc.StatusCode.UNKNOWN, details or str(err))
