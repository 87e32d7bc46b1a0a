from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApprovalAnswer(_message.Message):
    __slots__ = ["approval_id", "choice"]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    choice: str
    def __init__(self, approval_id: _Optional[str] = ..., choice: _Optional[str] = ...) -> None: ...

class ApprovalRequest(_message.Message):
    __slots__ = ["approval_id", "call_id", "choices", "command", "description", "pattern_key", "timeout_seconds"]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PATTERN_KEY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    call_id: str
    choices: _containers.RepeatedScalarFieldContainer[str]
    command: str
    description: str
    pattern_key: str
    timeout_seconds: int
    def __init__(self, approval_id: _Optional[str] = ..., call_id: _Optional[str] = ..., command: _Optional[str] = ..., description: _Optional[str] = ..., pattern_key: _Optional[str] = ..., choices: _Optional[_Iterable[str]] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class ApproveRequest(_message.Message):
    __slots__ = ["approval_id", "choice", "session_id", "task_id"]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    choice: str
    session_id: str
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., session_id: _Optional[str] = ..., approval_id: _Optional[str] = ..., choice: _Optional[str] = ...) -> None: ...

class ApproveResponse(_message.Message):
    __slots__ = ["result_json"]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    result_json: str
    def __init__(self, result_json: _Optional[str] = ...) -> None: ...

class CallToolRequest(_message.Message):
    __slots__ = ["arguments_json", "name", "session_id", "task_id"]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    arguments_json: str
    name: str
    session_id: str
    task_id: str
    def __init__(self, name: _Optional[str] = ..., arguments_json: _Optional[str] = ..., task_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class CallToolResponse(_message.Message):
    __slots__ = ["result_json"]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    result_json: str
    def __init__(self, result_json: _Optional[str] = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ["snapshot_id"]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ["deleted"]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: bool = ...) -> None: ...

class EndTaskRequest(_message.Message):
    __slots__ = ["task_id"]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class EndTaskResponse(_message.Message):
    __slots__ = ["released"]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: bool = ...) -> None: ...

class ForkRequest(_message.Message):
    __slots__ = ["label", "snapshot_id", "source_task_id", "task_id"]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    label: str
    snapshot_id: str
    source_task_id: str
    task_id: str
    def __init__(self, snapshot_id: _Optional[str] = ..., source_task_id: _Optional[str] = ..., task_id: _Optional[str] = ..., label: _Optional[str] = ...) -> None: ...

class ForkResponse(_message.Message):
    __slots__ = ["snapshot", "task_id"]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot: SnapshotInfo
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ...) -> None: ...

class InterruptRequest(_message.Message):
    __slots__ = ["task_id"]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class InterruptResponse(_message.Message):
    __slots__ = ["interrupted"]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    interrupted: int
    def __init__(self, interrupted: _Optional[int] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ["snapshots"]
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[SnapshotInfo]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[SnapshotInfo, _Mapping]]] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ["disabled_toolsets", "enabled_toolsets", "explain"]
    DISABLED_TOOLSETS_FIELD_NUMBER: _ClassVar[int]
    ENABLED_TOOLSETS_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    disabled_toolsets: _containers.RepeatedScalarFieldContainer[str]
    enabled_toolsets: _containers.RepeatedScalarFieldContainer[str]
    explain: bool
    def __init__(self, enabled_toolsets: _Optional[_Iterable[str]] = ..., disabled_toolsets: _Optional[_Iterable[str]] = ..., explain: bool = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ["availability_json", "backend", "tools_json", "unknown_toolsets"]
    AVAILABILITY_JSON_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_TOOLSETS_FIELD_NUMBER: _ClassVar[int]
    availability_json: str
    backend: str
    tools_json: str
    unknown_toolsets: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tools_json: _Optional[str] = ..., unknown_toolsets: _Optional[_Iterable[str]] = ..., availability_json: _Optional[str] = ..., backend: _Optional[str] = ...) -> None: ...

class ResumeRequest(_message.Message):
    __slots__ = ["task_id"]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class ResumeResponse(_message.Message):
    __slots__ = ["resumed"]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    resumed: bool
    def __init__(self, resumed: bool = ...) -> None: ...

class SessionClientMessage(_message.Message):
    __slots__ = ["approval_answer", "call", "interrupt", "settings", "subscribe_events"]
    APPROVAL_ANSWER_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    approval_answer: ApprovalAnswer
    call: SessionToolCall
    interrupt: InterruptRequest
    settings: SessionSettings
    subscribe_events: TaskEventsRequest
    def __init__(self, call: _Optional[_Union[SessionToolCall, _Mapping]] = ..., approval_answer: _Optional[_Union[ApprovalAnswer, _Mapping]] = ..., interrupt: _Optional[_Union[InterruptRequest, _Mapping]] = ..., settings: _Optional[_Union[SessionSettings, _Mapping]] = ..., subscribe_events: _Optional[_Union[TaskEventsRequest, _Mapping]] = ...) -> None: ...

class SessionServerMessage(_message.Message):
    __slots__ = ["approval_request", "event", "events_ready", "output", "result"]
    APPROVAL_REQUEST_FIELD_NUMBER: _ClassVar[int]
    EVENTS_READY_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    approval_request: ApprovalRequest
    event: TaskEvent
    events_ready: TaskEventsReady
    output: SessionToolOutput
    result: SessionToolResult
    def __init__(self, output: _Optional[_Union[SessionToolOutput, _Mapping]] = ..., result: _Optional[_Union[SessionToolResult, _Mapping]] = ..., approval_request: _Optional[_Union[ApprovalRequest, _Mapping]] = ..., event: _Optional[_Union[TaskEvent, _Mapping]] = ..., events_ready: _Optional[_Union[TaskEventsReady, _Mapping]] = ...) -> None: ...

class SessionSettings(_message.Message):
    __slots__ = ["session_id", "yolo"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    YOLO_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    yolo: bool
    def __init__(self, session_id: _Optional[str] = ..., yolo: bool = ...) -> None: ...

class SessionToolCall(_message.Message):
    __slots__ = ["call_id", "request"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    request: CallToolRequest
    def __init__(self, call_id: _Optional[str] = ..., request: _Optional[_Union[CallToolRequest, _Mapping]] = ...) -> None: ...

class SessionToolOutput(_message.Message):
    __slots__ = ["call_id", "text"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    text: str
    def __init__(self, call_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class SessionToolResult(_message.Message):
    __slots__ = ["call_id", "error_status", "result_json"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    error_status: str
    result_json: str
    def __init__(self, call_id: _Optional[str] = ..., result_json: _Optional[str] = ..., error_status: _Optional[str] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ["backend", "created_at", "includes", "includes_processes", "label", "size_bytes", "snapshot_id", "source_task_id"]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    INCLUDES_FIELD_NUMBER: _ClassVar[int]
    INCLUDES_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    backend: str
    created_at: str
    includes: _containers.RepeatedScalarFieldContainer[str]
    includes_processes: bool
    label: str
    size_bytes: int
    snapshot_id: str
    source_task_id: str
    def __init__(self, snapshot_id: _Optional[str] = ..., label: _Optional[str] = ..., source_task_id: _Optional[str] = ..., backend: _Optional[str] = ..., created_at: _Optional[str] = ..., size_bytes: _Optional[int] = ..., includes_processes: bool = ..., includes: _Optional[_Iterable[str]] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ["label", "task_id"]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    label: str
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., label: _Optional[str] = ...) -> None: ...

class SnapshotResponse(_message.Message):
    __slots__ = ["snapshot"]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: SnapshotInfo
    def __init__(self, snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ...) -> None: ...

class SuspendRequest(_message.Message):
    __slots__ = ["task_id"]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class SuspendResponse(_message.Message):
    __slots__ = ["processes_kept", "suspended"]
    PROCESSES_KEPT_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    processes_kept: bool
    suspended: bool
    def __init__(self, suspended: bool = ..., processes_kept: bool = ...) -> None: ...

class TaskEvent(_message.Message):
    __slots__ = ["event_json", "id", "task_id", "text", "type"]
    EVENT_JSON_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    event_json: str
    id: str
    task_id: str
    text: str
    type: str
    def __init__(self, task_id: _Optional[str] = ..., id: _Optional[str] = ..., type: _Optional[str] = ..., event_json: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class TaskEventsReady(_message.Message):
    __slots__ = ["error", "last_id", "task_id"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    error: str
    last_id: str
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., last_id: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class TaskEventsRequest(_message.Message):
    __slots__ = ["after", "task_id"]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    after: str
    task_id: str
    def __init__(self, task_id: _Optional[str] = ..., after: _Optional[str] = ...) -> None: ...

class TaskEventsResponse(_message.Message):
    __slots__ = ["event", "ready"]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    event: TaskEvent
    ready: TaskEventsReady
    def __init__(self, ready: _Optional[_Union[TaskEventsReady, _Mapping]] = ..., event: _Optional[_Union[TaskEvent, _Mapping]] = ...) -> None: ...
