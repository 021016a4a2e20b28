"""loud: passes each record on unchanged and writes one stderr line (JSON, tagged) for it."""
import json
import sys


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    kind = msg.get("type")
    if kind == "hello":
        send({"type": "ready"})
    elif kind == "item":
        payload = msg.get("payload") or {}
        # tagged with its item and attempt, as the SDKs' item logs are: the engine reads stderr
        # apart from stdout, so an untagged line could be told with the delivery before
        print(json.dumps({"level": "info", "msg": "loud: passing " + str(payload.get("id")),
                          "item": msg.get("id"), "attempt": msg.get("attempt")}), file=sys.stderr, flush=True)
        out = {"type": "emit", "delivery": msg["delivery"], "payload": payload}
        if msg.get("key") is not None:
            out["key"] = msg["key"]
        send(out)
        send({"type": "done", "delivery": msg["delivery"]})
    elif kind == "shutdown":
        break
