"""Tool result strings to Python values."""
from __future__ import annotations

import json
from typing import Any


def parse_result(text: str) -> Any:
    """The parsed JSON of a tool's result string; the string itself when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    # Older servers put a note after a truncated search_files object ("[Hint: Results truncated. ...]");
    # today's carry it inside the JSON as _hint. Either way the object is the result.
    cut = text.rfind("\n\n[Hint: ")
    if cut > 0:
        try:
            return json.loads(text[:cut])
        except ValueError:
            pass
    return text
