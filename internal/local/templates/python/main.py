"""{{.Name}}: a Millstream action in Python (standard library only).

Write your logic in `handle`; the part below it speaks the protocol: it answers hello with
ready, calls `handle` once per item, turns its return value into emits and done, an
`ActionError` into error and an `Abstain` into abstain, and exits 0 on shutdown. Logs go to
stderr (`log`); stdout carries protocol lines only.
"""
import json
import sys
import traceback


class ActionError(Exception):
    """The item failed; retryable=True lets the engine try it again."""

    def __init__(self, message, retryable=False):
        super().__init__(message)
        self.retryable = retryable


class Abstain(Exception):
    """The action is unsure of this item: it goes to the --fallback outlet."""


def handle(payload, config, key=None):
    """Returns the outputs of one item: a list of payloads, or of (key, payload) pairs."""
    greeting = config.get("greeting")
    if not isinstance(greeting, str):
        raise ActionError("config greeting must be a string")
    name = payload.get("name") if isinstance(payload, dict) else None
    if not isinstance(name, str) or not name:
        raise ActionError("payload has no name")
    return [{"message": f"{greeting}, {name}!"}]


# ---- the protocol -------------------------------------------------------------------------

def log(text):
    print(text, file=sys.stderr, flush=True)


def send(msg):
    sys.stdout.write(json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def answer(msg, config):
    delivery = msg["delivery"]
    try:
        outputs = handle(msg.get("payload"), config, msg.get("key"))
    except Abstain as why:
        return send({"type": "abstain", "delivery": delivery, "reason": str(why)})
    except ActionError as err:
        return send({"type": "error", "delivery": delivery, "message": str(err), "retryable": err.retryable})
    except Exception as err:  # a bug in handle fails this item, not the process
        log(traceback.format_exc())
        return send({"type": "error", "delivery": delivery, "message": repr(err), "retryable": False})
    for out in outputs or []:
        emit = {"type": "emit", "delivery": delivery}
        if isinstance(out, tuple):
            emit["key"], emit["payload"] = out
        else:
            emit["payload"] = out
            if "key" in msg:
                emit["key"] = msg["key"]
        send(emit)
    send({"type": "done", "delivery": delivery})


def main():
    sys.stdin.reconfigure(encoding="utf-8")
    sys.stdout.reconfigure(encoding="utf-8")
    config = {}
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            log("{{.Name}}: an input line is not JSON")
            continue
        kind = msg.get("type") if isinstance(msg, dict) else None
        if kind == "hello":
            config = msg.get("config") if isinstance(msg.get("config"), dict) else {}
            send({"type": "ready"})
        elif kind == "item":
            answer(msg, config)
        elif kind == "shutdown":
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
