#!/usr/bin/env python3
"""Waiting on a call, the common case, on the millrace SDK: an async def handler, so up to 128
deliveries wait at once in one process (each answered as its call returns). The call here is
asyncio.sleep(0.02), standing for an HTTP request, a query or a model; with an async client
(httpx, aiohttp, asyncpg, …) it is the same shape:

    async def handle(payload, item):
        r = await client.post(URL, json=payload, headers={"Idempotency-Key": item.idempotency_key})
        r.raise_for_status()
        return r.json()
"""
import asyncio
import os
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import millrace  # noqa: E402


async def handle(payload: Any, item: millrace.Item) -> Any:
    await asyncio.sleep(0.02)  # the call
    return payload


millrace.map(handle)
