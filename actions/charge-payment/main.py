"""charge-payment: a Millstream action with external effects, Python standard library only.

Each order is charged with one POST to the payment service named by the `endpoint` config. The
request carries the item's idempotencyKey (the same on every attempt of one record) in the
Idempotency-Key header: the service applies a key once and answers a repeat with the first
result, so an attempt whose answer was lost, or that crashed after the request, is safe to retry.

Outcomes: 2xx -> a receipt is emitted; 4xx -> a non-retryable error (the order is refused and,
with --dead-letter, routed unchanged to `failed`); 5xx or no answer -> a retryable error.
"""
import json
import os
import sys
import urllib.error
import urllib.request

# goduration.py stands beside main.py in an image, in actions/ in the repository; no bytecode
# cache is written there (a __pycache__ folder in actions/ would read as an action).
sys.dont_write_bytecode = True
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from goduration import parse_duration  # noqa: E402


def send(msg):
    sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def log(level, msg, **fields):
    print(json.dumps({"level": level, "msg": msg, **fields}), file=sys.stderr, flush=True)


def charge(config, msg):
    delivery = msg["delivery"]
    body = json.dumps({"order": msg.get("payload")}).encode()
    request = urllib.request.Request(config["endpoint"], data=body, method="POST", headers={
        "Content-Type": "application/json",
        "Idempotency-Key": msg["idempotencyKey"],
    })
    try:
        with urllib.request.urlopen(request, timeout=config["timeout"]) as answer:
            receipt = json.load(answer)
    except urllib.error.HTTPError as err:
        retryable = err.code >= 500 or err.code == 429
        return send({"type": "error", "delivery": delivery, "retryable": retryable,
                     "message": f"payment service answered {err.code} for attempt {msg.get('attempt')}"})
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as err:
        return send({"type": "error", "delivery": delivery, "retryable": True,
                     "message": f"payment service unreachable: {err}"})
    out = {"type": "emit", "delivery": delivery, "outlet": "receipts", "payload": receipt}
    if msg.get("key") is not None:
        out["key"] = msg["key"]
    send(out)
    send({"type": "done", "delivery": delivery})


def main():
    config, config_error = None, None
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            log("error", "input line is not JSON")
            continue
        kind = msg.get("type") if isinstance(msg, dict) else None
        if kind == "hello":
            raw = msg.get("config") or {}
            try:
                config = {"endpoint": str(raw["endpoint"]), "timeout": parse_duration(raw["request-timeout"])}
            except (KeyError, TypeError, ValueError) as err:
                config_error = f"config is not usable: {err!r}; want endpoint (string) and request-timeout (duration)"
                log("error", config_error)
            send({"type": "ready"})
        elif kind == "item":
            if config_error:
                send({"type": "error", "delivery": msg["delivery"], "message": config_error, "retryable": False})
            else:
                charge(config, msg)
        elif kind == "shutdown":
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
