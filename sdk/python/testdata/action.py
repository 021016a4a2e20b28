#!/usr/bin/env python3
"""The action test_millrace.py drives: argv[1] picks the handler, payload "do" what it does."""
import dataclasses
import os
import sys
import time

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


mode = sys.argv[1]
if mode == "map":
    millrace.map(handle, config=Config)
elif mode == "keyed":
    millrace.map_keyed(keyed)
elif mode == "batch":
    millrace.batch(batched, size=int(sys.argv[2]), linger=float(sys.argv[3]))
elif mode == "batch-short":
    millrace.batch(lambda items: items[1:], size=4)
