"""hermes_tools from outside: the functions execute_code scripts import, run
against a Berth task over gRPC instead of the sandbox's socket.

A script written for execute_code (``from hermes_tools import terminal, ...``)
runs unchanged on your machine with ``PYTHONPATH=clients/python`` (or after
``pip install ./clients/python``), and its calls act on the task's
environment. Configured by environment variables:

    BERTH_SERVER   dispatcher address (default 127.0.0.1:7700)
    BERTH_API_KEY  API key, when the server has tenants
    BERTH_TASK     task id (default "default", as for `berth call`)
    BERTH_SESSION  session id (optional)
    BERTH_TLS      1/true for TLS with the system's roots

Nobody can answer an approval request from inside a script, so calls are
sent non-interactive: a dangerous command follows the tenant's
``approvals.non_interactive`` (approve, or deny), as for a CI job. Limits of
execute_code (call count, timeout) do not apply; the server's quotas do.
"""
from __future__ import annotations

import json as _json
import os as _os
import shlex as _shlex
import threading as _threading
import time as _time
from typing import Any, Callable, Optional, TypeVar

from .client import Berth as _Berth
from .client import Task as _Task
from .errors import BerthError as _BerthError

_T = TypeVar("_T")
_lock = _threading.Lock()
_task: Optional[_Task] = None


class HermesToolsError(RuntimeError):
    """The channel to Berth failed (not the tool: tool errors come back as results)."""


def _current_task() -> _Task:
    global _task
    with _lock:
        if _task is None:
            berth = _Berth.from_env(interactive=False)
            _task = berth.task(_os.environ.get("BERTH_TASK") or "default", _os.environ.get("BERTH_SESSION") or "")
        return _task


def _json_or_text(text: str) -> Any:
    try:
        return _json.loads(text)
    except ValueError:
        pass
    # Older servers put a note after a truncated search_files object ("[Hint: Results truncated. ...]");
    # today's carry it inside the JSON as _hint. Either way the object is the result.
    cut = text.rfind("\n\n[Hint: ")
    if cut > 0:
        try:
            return _json.loads(text[:cut])
        except ValueError:
            pass
    return text


def _decode(text: str) -> Any:
    # Same unwrapping as the sandbox's stub, so scripts see identical values.
    result = _json_or_text(text)
    if isinstance(result, str) and result is not text:
        return _json_or_text(result)
    return result


def _call(tool: str, args: dict) -> Any:
    args = {k: v for k, v in args.items() if v is not None}
    try:
        return _decode(_current_task().call_json(tool, args))
    except _BerthError as exc:
        raise HermesToolsError(f"{tool}: {exc}") from exc


def json_parse(text: str) -> Any:
    """json.loads that also accepts control characters inside strings (as tool output often has)
    and a leading UTF-8 byte order mark (as some files and tools prepend)."""
    if isinstance(text, str) and text.startswith("\ufeff"):
        text = text[1:]
    return _json.loads(text, strict=False)


def shell_quote(s: Any) -> str:
    """Quote s as one shell word, for building terminal() commands."""
    return _shlex.quote(str(s))


def retry(fn: Callable[[], _T], max_attempts: int = 3, delay: float = 2) -> _T:
    """Call fn() until it returns without raising; wait delay, 2*delay, ... seconds between attempts."""
    last: Optional[BaseException] = None
    for attempt in range(max_attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - retrying is the point
            last = exc
            if attempt < max_attempts - 1:
                _time.sleep(delay * (2 ** attempt))
    if last is None:
        raise ValueError("retry: max_attempts must be at least 1")
    raise last


def web_search(query, limit=5):
    """Search the web; results in ["data"]["web"], each with "title", "url" and "description"."""
    return _call("web_search", {"query": query, "limit": limit})


def web_extract(urls, char_limit=None):
    """Fetch pages (a list of URLs) as text; one entry per URL in ["results"], with "content"."""
    return _call("web_extract", {"urls": urls, "char_limit": char_limit})


def read_file(path, offset=1, limit=2000):
    """Read a text file with line numbers; the text is in ["content"]."""
    return _call("read_file", {"path": path, "offset": offset, "limit": limit})


def write_file(path, content, cross_profile=False):
    """Create or overwrite a file (parent directories are created)."""
    return _call("write_file", {"path": path, "content": content, "cross_profile": cross_profile})


def search_files(
    pattern, target="content", path=".", file_glob=None, limit=50, offset=0, output_mode="content", context=0,
    order="discovery",
):
    """Search file contents (regex) or names (target="files"); hits in ["matches"] with "path", "line", "content"."""
    return _call(
        "search_files",
        {
            "pattern": pattern, "target": target, "path": path, "file_glob": file_glob, "limit": limit,
            "offset": offset, "output_mode": output_mode, "context": context, "order": order,
        },
    )


def patch(
    path=None, old_string=None, new_string=None, replace_all=False, mode="replace", patch=None, cross_profile=False,
):
    """Replace old_string with new_string in a file (mode="replace"), or apply a V4A patch (mode="patch")."""
    return _call(
        "patch",
        {
            "path": path, "old_string": old_string, "new_string": new_string, "replace_all": replace_all,
            "mode": mode, "patch": patch, "cross_profile": cross_profile,
        },
    )


def terminal(command, timeout=None, workdir=None):
    """Run a shell command in the foreground; ["output"] and ["exit_code"]. No background or pty."""
    return _call("terminal", {"command": command, "timeout": timeout, "workdir": workdir})


__all__ = [
    "web_search", "web_extract", "read_file", "write_file", "search_files", "patch", "terminal",
    "json_parse", "shell_quote", "retry", "HermesToolsError",
]
