"""{{.Name}}: a Millstream action in Python with the standard library only.

This file is the whole protocol, written out by hand, as a starting point in any language.
One JSON object per line, UTF-8, in this order:

  engine: {"type":"hello","config":{...},...}          action: {"type":"ready"{{if .State}},"state":true{{end}}}
  engine: {"type":"item","delivery":"…","key":"…","payload":{...},...{{if .State}},"state":…{{end}}}
  action: any number of {"type":"emit","delivery":"…","payload":{...}}, then{{if .State}}
          at most one {"type":"state","delivery":"…","state":…} (the key's next state; null
          deletes it; applied only if the item is done), then{{end}} exactly one of
          {"type":"done","delivery":"…"}
          {"type":"error","delivery":"…","retryable":false,"message":"…"}
          {"type":"abstain","delivery":"…","reason":"…"}
  engine: {"type":"shutdown"}                          action: exits with status 0

Nothing but these lines goes to stdout; logs go to stderr. Keys and message types the program
does not know are ignored, so the protocol can grow.

This program answers one item at a time. One that waits on a call (HTTP, a database) can run
many at once: add --concurrency 8 to the action line (8 processes), or declare "window": 128
and "concurrent": true in ready and answer each delivery as its call returns, in any order
(docs/protocol.md, the window).
"""
import json
import sys

sys.stdin.reconfigure(encoding="utf-8")
sys.stdout.reconfigure(encoding="utf-8")


def send(msg):
    sys.stdout.write(json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()  # stdout is a pipe: unflushed, the answer would sit in a buffer


def log(text):
    print(text, file=sys.stderr, flush=True)


config = {}
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        log("{{.Name}}: an input line is not JSON")
        continue
    kind = msg.get("type") if isinstance(msg, dict) else None
    if kind == "hello":
        config = msg.get("config") or {}
        send({"type": "ready"{{if .State}}, "state": True{{end}}})
    elif kind == "item":
        delivery = msg["delivery"]
        greeting = config.get("greeting") if isinstance(config, dict) else None
        payload = msg.get("payload")
        name = payload.get("name") if isinstance(payload, dict) else None
        if not isinstance(greeting, str):
            # a malformed config is answered item by item, never by a crash
            send({"type": "error", "delivery": delivery, "retryable": False,
                  "message": "config greeting must be a string"})
        elif not isinstance(name, str) or not name:
            send({"type": "error", "delivery": delivery, "retryable": False,
                  "message": "payload has no name"})
        else:
            out = {"type": "emit", "delivery": delivery, "payload": {"message": f"{greeting}, {name}!"}}
            if "key" in msg:
                out["key"] = msg["key"]  # keep the record's key
{{- if .State}}
            # "state" is the key's state, absent when it has none (a first visit, a keyless record)
            state = msg.get("state") if isinstance(msg.get("state"), dict) else {}
            visits = (state.get("visits") if type(state.get("visits")) is int else 0) + 1
            out["payload"]["visits"] = visits
            send(out)
            if "key" in msg or "keyBase64" in msg:  # a keyless record has no state
                send({"type": "state", "delivery": delivery, "state": {"visits": visits}})
{{- else}}
            send(out)
{{- end}}
            send({"type": "done", "delivery": delivery})
    elif kind == "shutdown":
        sys.exit(0)
