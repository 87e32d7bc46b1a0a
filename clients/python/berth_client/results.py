"""Tool result strings to Python values."""
from __future__ import annotations

import json
from typing import Any


def parse_result(text: str) -> Any:
    """The parsed JSON of a tool's result string; the string itself when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text
