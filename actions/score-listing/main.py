"""score-listing: a Millstream action in Python with the standard library only.

One JSON object per line on stdin, answers on stdout, logs on stderr. The config arrives in
`hello`, already resolved: integers and doubles as numbers, durations as Go duration strings
("720h0m0s").
"""
import json
import os
import sys

# goduration.py stands beside main.py in an image, in actions/ in the repository; no bytecode
# cache is written there (a __pycache__ folder in actions/ would read as an action).
sys.dont_write_bytecode = True
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from goduration import parse_duration  # noqa: E402


def send(msg):
    sys.stdout.write(json.dumps(msg, separators=(",", ":"), ensure_ascii=False) + "\n")
    sys.stdout.flush()


class Scorer:
    def __init__(self, config):
        self.error = None
        try:
            self.min_rooms = int(config["min-rooms"])
            self.price_weight = float(config["price-weight"])
            self.max_age_hours = parse_duration(config["max-age"]) / 3600
        except (KeyError, TypeError, ValueError) as err:
            self.error = f"config is not usable: {err!r}; want min-rooms (integer), price-weight (double), max-age (duration)"
            print(json.dumps({"level": "error", "msg": self.error}), file=sys.stderr, flush=True)

    def item(self, msg):
        delivery = msg["delivery"]
        if self.error:
            return send({"type": "error", "delivery": delivery, "message": self.error, "retryable": False})
        listing = msg.get("payload")
        if not isinstance(listing, dict):
            return send({"type": "error", "delivery": delivery, "message": "payload is not a listing object", "retryable": False})
        surface = listing.get("surface_m2") or 0
        if surface <= 0:
            return send({"type": "abstain", "delivery": delivery, "reason": "no surface area"})
        key = msg.get("key")
        rooms = listing.get("rooms", 0)
        age = listing.get("age_hours", 0)
        if rooms < self.min_rooms or age > self.max_age_hours:
            why = "too few rooms" if rooms < self.min_rooms else "too old"
            out = {"type": "emit", "delivery": delivery, "outlet": "rejects", "payload": listing,
                   "headers": [{"key": "reject-reason", "value": why}]}
        else:
            per_m2 = listing.get("price_eur", 0) / surface
            score = max(0, min(100, round(100 - self.price_weight * per_m2 / 100)))
            send({"type": "metric", "delivery": delivery, "name": "price_per_m2", "value": round(per_m2, 2),
                  "labels": {"city": str(listing.get("city", "unknown"))}})
            out = {"type": "emit", "delivery": delivery, "outlet": "scores",
                   "payload": {"id": listing.get("id"), "score": score, "price_per_m2": round(per_m2, 2)}}
        if key is not None:
            out["key"] = key
        send(out)
        send({"type": "done", "delivery": delivery})


def main():
    scorer = None
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            print(json.dumps({"level": "error", "msg": "input line is not JSON"}), file=sys.stderr, flush=True)
            continue
        kind = msg.get("type") if isinstance(msg, dict) else None
        if kind == "hello":
            scorer = Scorer(msg.get("config") or {})
            send({"type": "ready"})
        elif kind == "item":
            scorer.item(msg)
        elif kind == "shutdown":
            return 0
        # unknown messages are ignored: the protocol may grow
    return 0


if __name__ == "__main__":
    sys.exit(main())
