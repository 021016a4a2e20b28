#!/usr/bin/env python3
"""The e2e suite's async action (e2e/async_test.go) on the Python SDK: an async def handler
whose `await asyncio.sleep(...)` stands for an API call, so the SDK runs many deliveries at
once. Every output names its input's partition and offset, so the test can check each against
the input's known order. The call's length is drawn from the input's place (0-7 ms), so
deliveries finish out of their arrival order. The first argument is the mode:

count   a running count per key in the key's state (run with --state): the output is
        {"p", "o", "k", "saw", "n"}, as the Go SDK's count of state_test.go writes it
call    stateless: the output is {"p", "o", "k", "attempt", "inflight", "held"}, inflight
        being how many handlers were running when this one started (itself included); a
        payload with "hang": true waits for ever (until its delivery is cancelled); one with
        "wait": true, started before a hung call was first cancelled, waits for that cancel
        (then held is true: it was in flight in the process when its neighbour was cancelled)
"""
import asyncio
import os
import sys
from typing import Any, Dict

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import millrace  # noqa: E402

running = 0
released = asyncio.Event()  # set when a hung call is first cancelled


def call_length(item: millrace.Item) -> float:
    """The stand-in call's length: 0-7 ms, fixed by the input's place."""
    return ((item.offset * 2654435761 + item.partition * 40503) % 8) / 1000


async def count(payload: Any, item: millrace.Item) -> Dict[str, Any]:
    st = item.state if isinstance(item.state, dict) else {}
    saw = st.get("n", 0)
    await asyncio.sleep(call_length(item))  # the call
    item.set_state({"n": saw + 1})
    return {"p": item.partition, "o": item.offset, "k": payload["k"], "saw": saw, "n": saw + 1}


async def call(payload: Any, item: millrace.Item) -> Dict[str, Any]:
    global running
    running += 1
    try:
        inflight, held = running, False
        if not isinstance(payload, dict):
            payload = {}
        if payload.get("hang") is True:
            try:
                await asyncio.Event().wait()  # a call that never returns
            except asyncio.CancelledError:
                released.set()
                raise
        if payload.get("wait") is True and not released.is_set():
            await released.wait()
            held = True
        await asyncio.sleep(call_length(item))  # the call
        return {"p": item.partition, "o": item.offset, "k": item.key, "attempt": item.attempt, "inflight": inflight,
                "held": held}
    finally:
        running -= 1


modes = {"count": count, "call": call}
if len(sys.argv) != 2 or sys.argv[1] not in modes:
    sys.exit("usage: async_action.py count|call (got %r)" % sys.argv[1:])
millrace.map(modes[sys.argv[1]])
