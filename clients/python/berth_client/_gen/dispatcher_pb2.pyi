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
    __slots__ = ["availability_json", "tools_json", "unknown_toolsets"]
    AVAILABILITY_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_TOOLSETS_FIELD_NUMBER: _ClassVar[int]
    availability_json: str
    tools_json: str
    unknown_toolsets: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tools_json: _Optional[str] = ..., unknown_toolsets: _Optional[_Iterable[str]] = ..., availability_json: _Optional[str] = ...) -> None: ...

class SessionClientMessage(_message.Message):
    __slots__ = ["approval_answer", "call", "interrupt", "settings"]
    APPROVAL_ANSWER_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    approval_answer: ApprovalAnswer
    call: SessionToolCall
    interrupt: InterruptRequest
    settings: SessionSettings
    def __init__(self, call: _Optional[_Union[SessionToolCall, _Mapping]] = ..., approval_answer: _Optional[_Union[ApprovalAnswer, _Mapping]] = ..., interrupt: _Optional[_Union[InterruptRequest, _Mapping]] = ..., settings: _Optional[_Union[SessionSettings, _Mapping]] = ...) -> None: ...

class SessionServerMessage(_message.Message):
    __slots__ = ["approval_request", "output", "result"]
    APPROVAL_REQUEST_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    approval_request: ApprovalRequest
    output: SessionToolOutput
    result: SessionToolResult
    def __init__(self, output: _Optional[_Union[SessionToolOutput, _Mapping]] = ..., result: _Optional[_Union[SessionToolResult, _Mapping]] = ..., approval_request: _Optional[_Union[ApprovalRequest, _Mapping]] = ...) -> None: ...

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
