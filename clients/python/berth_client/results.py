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
    # A JSON result followed by a note (search_files' "[Hint: Results truncated. ...]") is the JSON.
    cut = text.rfind("\n\n[Hint: ")
    if cut > 0:
        try:
            return json.loads(text[:cut])
        except ValueError:
            pass
    return text
