#!/usr/bin/env python3
"""dedup-python: drops an event whose id its key has seen within the window, on the millrace SDK.

The key's state is {"seen": {ID: TIMESTAMP_MS, ...}}: the ids the key has passed on, each with
its record's timestamp. An id seen within `within` of this record's timestamp is a duplicate:
acknowledged with no output, the state left alone (so the sidecar's TTL keeps counting from the
last new id). A new id is passed on and added; ids older than the window are pruned, and past
`max-ids` the oldest go. A keyless event has no state: it is passed on.
"""
import dataclasses
import os
import sys

# millrace.py beside this file wins (an image vendors it there); in the repository the SDK is
# sdk/python and goduration.py is in actions/. No bytecode cache is written: a __pycache__
# folder in actions/ would read as an action.
sys.dont_write_bytecode = True
_here = os.path.dirname(os.path.abspath(__file__))
sys.path += [os.path.join(_here, "..", "..", "sdk", "python"), os.path.join(_here, "..")]
import millrace  # noqa: E402
from goduration import parse_duration  # noqa: E402


@dataclasses.dataclass
class Config:  # hello's config: within arrives as a Go duration string ("24h0m0s")
    within: str = "24h"
    max_ids: int = 1000


def dedup(payload, item):
    event_id = payload.get("id") if isinstance(payload, dict) else None
    if not isinstance(event_id, str) or not event_id:
        raise ValueError("payload has no id")  # fails for good: --dead-letter sends it to invalid
    if item.key is None:
        return [payload]  # no key, no state: nothing to compare it with
    window_ms = parse_duration(item.config.within) * 1000
    state = item.state if isinstance(item.state, dict) else {}
    seen = state.get("seen") if isinstance(state.get("seen"), dict) else {}
    at = seen.get(event_id)
    if isinstance(at, int) and item.timestamp - at < window_ms:
        return []  # a duplicate: acknowledged, nothing written, the state as it was
    seen = {i: t for i, t in seen.items() if isinstance(t, int) and item.timestamp - t < window_ms}
    seen[event_id] = item.timestamp
    if len(seen) > item.config.max_ids:
        newest = sorted(seen.items(), key=lambda e: e[1])[-item.config.max_ids:]
        seen = dict(newest)
    item.set_state({"seen": seen})
    return [payload]  # passed on with the item's key


millrace.map_keyed(dedup, config=Config)
