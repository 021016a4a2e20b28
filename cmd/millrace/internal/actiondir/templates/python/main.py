#!/usr/bin/env python3
"""{{.Name}}: greets each name it is given, on the millrace SDK (millrace.py, vendored here).

The protocol and the SDK: docs/protocol.md and sdk/python/README.md in the millrace repository.
"""
import dataclasses

import millrace


@dataclasses.dataclass
class Config:  # hello's config, checked: a greeting that is not a string fails every item
    greeting: str = "Hello"


# Waiting on a call (HTTP, a database, a model server)? Make the handler a coroutine and await
# the call: millrace.map then runs many items at once, each answered as it completes:
#   async def greet(payload, item):
#       reply = await fetch(payload["name"])
def greet(payload, item):
    name = payload.get("name") if isinstance(payload, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError("payload has no name")  # the item fails (not retried); logged to stderr
    item.log.info("greeting", name=name)  # logs go to stderr; stdout is the protocol's
{{- if .State}}
    state = item.state if isinstance(item.state, dict) else {}  # item.state: None when none
    visits = (state.get("visits") if type(state.get("visits")) is int else 0) + 1
    if item.key is not None:  # a keyless record has no state
        item.set_state({"visits": visits})  # applied only if greet returns normally
    return {"message": f"{item.config.greeting}, {name}!", "visits": visits}
{{- else}}
    return {"message": f"{item.config.greeting}, {name}!"}  # one output, the item's key
{{- end}}


millrace.map(greet, config=Config)
