#!/usr/bin/env python3
"""The Python stateful action of BenchmarkState: a running count per key on the millrace SDK,
kept in the key's state as {"n": N}, that emits every item's payload as the SDK's echo does
(sdk/python/examples/echo.py). Beside that echo it costs a record exactly its state."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import millrace  # noqa: E402


def count(payload, item):
    state = item.state
    n = state["n"] if isinstance(state, dict) else 0
    item.set_state({"n": n + 1})
    return payload


millrace.map(count)
