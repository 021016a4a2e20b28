#!/usr/bin/env python3
"""The action test_millrace.py drives: argv[1] picks the handler, payload "do" what it does."""
import dataclasses
import os
import sys
import threading
import time

if sys.argv[1].startswith(("async", "returns")):  # the sequential modes start as fast as before
    import asyncio
    import logging

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import millrace  # noqa: E402


@dataclasses.dataclass
class Config:
    min_rooms: int = 2
    greeting: str = "hi"
    ratio: float = 0.5


def handle(payload, item):
    do = payload.get("do") if isinstance(payload, dict) else None
    if do == "abstain":
        raise millrace.Abstain("unsure")
    if do == "retry":
        raise millrace.Retryable("try again")
    if do == "raise":
        raise ValueError("boom")
    if do == "metric":
        item.metric("m", 2.5, {"l": "v"})
    if do == "log":
        item.log.info("hello log", n=1)
    if do == "print":
        print("stray print")
    if do == "workdir":
        with open(os.path.join(item.workdir, "f.txt"), "w") as f:
            f.write("x")
        return {"workdir": item.workdir, "exists": os.path.exists(os.path.join(millrace.workdir(), "f.txt"))}
    if do == "config":
        c = item.config
        return {"min_rooms": c.min_rooms, "greeting": c.greeting, "ratio": c.ratio}
    if do == "key":
        k = item.key
        return {"key": k.hex() if isinstance(k, bytes) else k,
                "headers": [[h, v.hex() if isinstance(v, bytes) else v] for h, v in item.headers],
                "id": item.id, "attempt": item.attempt, "idempotencyKey": item.idempotency_key}
    if do == "slow":
        time.sleep(0.06)
    if do == "gate":  # wait until the test creates the file: a handler still at work
        while not os.path.exists(payload["path"]):
            time.sleep(0.01)
    if do == "nan":
        return float("nan")
    if do in ("count", "count-raise"):  # a running count per key in the state
        n = (item.state or {}).get("n", 0) + 1
        item.set_state({"n": n})
        if do == "count-raise":
            raise ValueError("failed after staging")
        return {"n": n, "was": item.state}
    if do == "clear":
        item.set_state({"n": 99})
        item.clear_state()
        return {"was": item.state}
    if do == "set-state":  # payload["state"] as the new state; a refusal ignored when asked
        try:
            item.set_state(payload["state"])
        except millrace.StateError as exc:
            if not payload.get("ignore"):
                raise
            return {"refused": str(exc)}
        return {}
    return payload


def keyed(payload, item):
    if payload.get("do") == "none":
        return []
    return [
        millrace.Output(payload, key="a"),
        millrace.Output(payload, key=b"\xff\x00", outlet="other",
                        headers=[("h", b"\xfe"), ("t", "v"), ("n", None)]),
        payload,
    ]


def batched(items):
    if any(isinstance(i.payload, dict) and i.payload.get("do") == "boom-all" for i in items):
        raise RuntimeError("the whole batch")
    out = []
    for n, it in enumerate(items):
        do = it.payload.get("do") if isinstance(it.payload, dict) else None
        if do == "raise":
            out.append(ValueError("bad item"))
        elif do == "abstain":
            out.append(millrace.Abstain("not this one"))
        elif do == "count":
            n = (it.state or {}).get("n", 0) + 1
            it.set_state({"n": n})
            out.append({"n": n})
        else:
            it.metric("batch_size", len(items))
            out.append({"n": len(items), "i": n})
    return out


# -- concurrent handlers: payload "do" again picks what the handler does

PEAK = {"now": 0, "max": 0}  # deliveries in the handler at once, and the most seen
CANCELLED = []  # deliveries whose task saw its cancellation
FULL = None  # an asyncio.Event set once the window is full: "fill" handlers wait for it


async def wait_file(path):
    while not os.path.exists(path):
        await asyncio.sleep(0.005)


FINISHED = {}  # tag -> asyncio.Event: "after" items wait for another's end


def finished(tag):
    return FINISHED.setdefault(tag, asyncio.Event())


async def ahandle(payload, item):
    do = payload.get("do") if isinstance(payload, dict) else None
    PEAK["now"] += 1
    PEAK["max"] = max(PEAK["max"], PEAK["now"])
    try:
        if do == "fill":  # wait until the window is full: passes only when it runs all at once
            global FULL
            FULL = FULL or asyncio.Event()
            if PEAK["now"] >= int(sys.argv[2]):
                FULL.set()
            await FULL.wait()
        if do == "after":  # ends only after the item tagged payload["after"]: needs them at once
            if payload.get("after") is not None:
                await finished(payload["after"]).wait()
            finished(payload["tag"]).set()
        if do == "sleep":
            await asyncio.sleep(payload["ms"] / 1000)
        if do == "gate":
            await wait_file(payload["path"])
        if do == "hang":
            item.metric("before_hang", 1)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                CANCELLED.append(item.delivery)
                raise
        if do == "talk":  # prints and logs around an await: each tagged with its own delivery
            print("begin", item.id)
            sys.stdout.write("part of " + item.id)
            millrace.log.info("log of " + item.id)
            await wait_file(payload["path"])
            logging.warning("logging of %s", item.id)
            print(" ends", flush=True)
        if do == "status":
            return {"peak": PEAK["max"], "cancelled": CANCELLED}
        if do == "count":
            await asyncio.sleep(0.001)
            n = (item.state or {}).get("n", 0) + 1
            item.set_state({"n": n})
            item.metric("n", n)
            return {"n": n}
        if do == "abstain":
            raise millrace.Abstain("unsure")
        if do == "retry":
            await asyncio.sleep(0.001)
            raise millrace.Retryable("try again")
        if do == "raise":
            raise ValueError("boom")
        return payload
    finally:
        PEAK["now"] -= 1


async def abatched(items):
    await asyncio.sleep(0.001)
    out = []
    for it in items:
        do = it.payload.get("do") if isinstance(it.payload, dict) else None
        if do == "gate":
            await wait_file(it.payload["path"])
        if do == "hang":
            await asyncio.Event().wait()
        if do == "raise":
            out.append(ValueError("bad item"))
        elif do == "abstain":
            out.append(millrace.Abstain("not this one"))
        elif do == "retry":
            out.append(millrace.Retryable("again"))
        elif do == "count":
            n = (it.state or {}).get("n", 0) + 1
            it.set_state({"n": n})
            out.append({"n": n})
        else:
            it.metric("batch_size", len(items))
            out.append({"n": len(items), "p": it.payload})
    return out


BARRIER = None  # threads: "barrier" items pass only when N of them run at once
LOCK = threading.Lock()


def threaded(payload, item):
    do = payload.get("do") if isinstance(payload, dict) else None
    with LOCK:
        PEAK["now"] += 1
        PEAK["max"] = max(PEAK["max"], PEAK["now"])
    try:
        if do == "barrier":
            BARRIER.wait(timeout=10)
        if do == "hang":
            threading.Event().wait()
        if do == "print":
            print("thread print", item.id)
        if do == "status":
            return {"peak": PEAK["max"]}
        if do == "count":
            n = (item.state or {}).get("n", 0) + 1
            item.set_state({"n": n})
            return {"n": n}
        return payload
    finally:
        with LOCK:
            PEAK["now"] -= 1


mode = sys.argv[1]
if mode == "async":
    millrace.map(ahandle, window=int(sys.argv[2]) if len(sys.argv) > 2 else None)
elif mode == "async-keyed":
    async def akeyed(payload, item):
        await asyncio.sleep(0.001)
        return [millrace.Output(payload, key="a"), payload]
    millrace.map_keyed(akeyed)
elif mode == "async-batch":
    millrace.batch(abatched, size=int(sys.argv[2]), linger=float(sys.argv[3]))
elif mode == "threads":
    BARRIER = threading.Barrier(int(sys.argv[2]))
    millrace.map(threaded, threads=int(sys.argv[2]))
elif mode == "threads-batch":
    millrace.batch(lambda items: [threaded(i.payload, i) for i in items], size=4, threads=2)
elif mode == "returns-coroutine":
    millrace.map(lambda payload, item: ahandle(payload, item))
elif mode == "map":
    millrace.map(handle, config=Config)
elif mode == "keyed":
    millrace.map_keyed(keyed)
elif mode == "batch":
    millrace.batch(batched, size=int(sys.argv[2]), linger=float(sys.argv[3]))
elif mode == "batch-short":
    millrace.batch(lambda items: items[1:], size=4)
