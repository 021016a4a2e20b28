"""Go duration strings for the Python example actions, standard library only.

The engine gives a duration param in hello as a Go duration string ("5s", "720h0m0s"). The
examples import this file from here (actions/); an image that holds one example copies it
beside its main.py (deploy/examples/python/Dockerfile).
"""
import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text):
    """Seconds in a Go duration string such as "5s", "1h30m" or "720h0m0s"."""
    if text in ("0", "0s"):
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"not a duration: {text!r}")
    return total
