"""One method per built-in tool, shared by the sync Task and the asyncio
AsyncTask: each builds the tool's arguments and hands them to call(), which
returns the parsed result (sync) or an awaitable of it (asyncio)."""
from __future__ import annotations

from typing import Any, Dict, Generic, Mapping, Optional, Sequence, TypeVar, Union

R = TypeVar("R")


def _args(**kwargs: Any) -> Dict[str, Any]:
    """Keyword arguments as tool arguments; None means "the tool's default" and is left out."""
    return {k: v for k, v in kwargs.items() if v is not None}


class ToolMethods(Generic[R]):
    """terminal, process_manage, read_file, write_file, patch, search_files, execute_code.

    A tool that fails returns a dict with "error" (what a model would read);
    only failures of Berth itself raise (see berth_client.errors).
    """

    def call(self, name: str, args: Optional[Mapping[str, Any]] = None, *, timeout: Optional[float] = None) -> R:
        raise NotImplementedError

    def terminal(
        self,
        command: str,
        *,
        background: Optional[bool] = None,
        timeout: Optional[int] = None,
        workdir: Optional[str] = None,
        pty: Optional[bool] = None,
        notify: Union[bool, Sequence[str], None] = None,
        heartbeat: Optional[int] = None,
        persist_on_release: Optional[bool] = None,
        notify_on_complete: Optional[bool] = None,
        watch_patterns: Optional[Sequence[str]] = None,
    ) -> R:
        """Runs a shell command; cwd, exported variables and functions persist between calls.

        Result: {"output", "exit_code", "error"}; a background command gives a
        "session_id" for process_manage(). ``timeout`` is the command's, in seconds.
        With background=True: ``notify=True`` announces the exit, ``notify=[...]``
        watches the output for those strings, ``heartbeat`` (seconds, at least 60)
        reports progress; ``pty``, ``notify``, ``heartbeat`` and ``persist_on_release``
        are refused on a foreground call. ``notify_on_complete`` and ``watch_patterns``
        are the older spellings of ``notify`` (still accepted).
        """
        if notify is not None and not isinstance(notify, bool):
            notify = list(notify)
        return self.call(
            "terminal",
            _args(
                command=command, background=background, timeout=timeout, workdir=workdir, pty=pty,
                notify=notify, heartbeat=heartbeat, persist_on_release=persist_on_release,
                notify_on_complete=notify_on_complete,
                watch_patterns=list(watch_patterns) if watch_patterns is not None else None,
            ),
        )

    def process_manage(
        self,
        action: str,
        session_id: Optional[str] = None,
        *,
        data: Optional[str] = None,
        timeout: Optional[int] = None,
        offset: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> R:
        """Manages background processes: list, poll, log, wait, kill, write, submit, close, handoff (subagents only).

        session_id may be any unique prefix of the id terminal(background=True) returned.
        """
        return self.call(
            "process_manage",
            _args(action=action, session_id=session_id, data=data, timeout=timeout, offset=offset, limit=limit),
        )

    def process(
        self,
        action: str,
        session_id: Optional[str] = None,
        *,
        data: Optional[str] = None,
        timeout: Optional[int] = None,
        offset: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> R:
        """Deprecated: the tool is now process_manage (use process_manage()). Sends the old
        name, which the server still accepts."""
        return self.call(
            "process", _args(action=action, session_id=session_id, data=data, timeout=timeout, offset=offset, limit=limit)
        )

    def read_file(self, path: str, offset: Optional[int] = None, limit: Optional[int] = None) -> R:
        """Reads a text file with line numbers: {"content", "total_lines", ...}."""
        return self.call("read_file", _args(path=path, offset=offset, limit=limit))

    def write_file(self, path: str, content: str) -> R:
        """Creates or overwrites a file (parent directories are created)."""
        return self.call("write_file", {"path": path, "content": content})

    def patch(
        self,
        path: Optional[str] = None,
        old_string: Optional[str] = None,
        new_string: Optional[str] = None,
        replace_all: Optional[bool] = None,
        mode: Optional[str] = None,
        patch: Optional[str] = None,
    ) -> R:
        """Replaces old_string with new_string in path (mode "replace"), or applies a V4A patch (mode "patch")."""
        return self.call(
            "patch",
            _args(path=path, old_string=old_string, new_string=new_string, replace_all=replace_all, mode=mode, patch=patch),
        )

    def search_files(
        self,
        pattern: str,
        *,
        target: Optional[str] = None,
        path: Optional[str] = None,
        file_glob: Optional[str] = None,
        limit: Optional[int] = None,
        offset: Optional[int] = None,
        output_mode: Optional[str] = None,
        context: Optional[int] = None,
    ) -> R:
        """Searches file contents (regex) or, with target="files", file names."""
        return self.call(
            "search_files",
            _args(
                pattern=pattern, target=target, path=path, file_glob=file_glob, limit=limit, offset=offset,
                output_mode=output_mode, context=context,
            ),
        )

    def execute_code(self, code: str) -> R:
        """Runs a Python script that calls tools through ``hermes_tools`` in the task's sandbox."""
        return self.call("execute_code", {"code": code})
