#!/usr/bin/env python3
"""A running count per key on the millrace SDK: each item's output is how many items its key
has had, kept in the key's state. A keyless item has no state: it counts 1."""
import os
import sys
from typing import Any, Dict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import millrace  # noqa: E402


def count(payload: Any, item: millrace.Item) -> Dict[str, int]:
    state: Dict[str, Any] = item.state if isinstance(item.state, dict) else {}
    n = state.get("n", 0) if type(state.get("n")) is int else 0
    n += 1
    if item.key is not None:
        item.set_state({"n": n})
    return {"n": n}


millrace.map(count)
