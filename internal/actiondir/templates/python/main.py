#!/usr/bin/env python3
"""{{.Name}}: greets each name it is given, on the millrace SDK (millrace.py, vendored here).

The protocol and the SDK: docs/protocol.md and sdk/python/README.md in the millrace repository.
"""
import dataclasses

import millrace


@dataclasses.dataclass
class Config:  # hello's config, checked: a greeting that is not a string fails every item
    greeting: str = "Hello"


def greet(payload, item):
    name = payload.get("name") if isinstance(payload, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError("payload has no name")  # the item fails (not retried); logged to stderr
    item.log.info("greeting", name=name)  # logs go to stderr; stdout is the protocol's
    return {"message": f"{item.config.greeting}, {name}!"}  # one output, the item's key


millrace.map(greet, config=Config)
