#!/usr/bin/env python3
"""The Python async action of BenchmarkWaiting: a call per record that takes sys.argv[1]
milliseconds (a stand-in for an HTTP API: await asyncio.sleep), then the payload out again,
its key kept; an async def handler on the millrace SDK at its defaults."""
import asyncio
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import millrace  # noqa: E402

CALL = float(sys.argv[1]) / 1000


async def handle(payload, item):
    await asyncio.sleep(CALL)
    return payload


millrace.map(handle)
