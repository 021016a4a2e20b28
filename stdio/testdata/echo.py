#!/usr/bin/env python3
"""The Python echo loop of the stdio benchmarks: an action that emits every item's payload.

Standard library only. It reads stdin in chunks and answers every complete line of a chunk
before writing them out in one go, so it streams when the engine writes ahead and answers at
once when the engine waits. Usage: echo.py [--window N] (declare a delivery window in ready).
"""
import json
import os
import sys


def main():
    window = 0
    if len(sys.argv) == 3 and sys.argv[1] == "--window":
        window = int(sys.argv[2])
    loads, dumps = json.loads, json.dumps
    infd, outfd = sys.stdin.fileno(), sys.stdout.fileno()
    pending = b""
    while True:
        chunk = os.read(infd, 1 << 16)
        if not chunk:
            return 0
        pending += chunk
        *lines, pending = pending.split(b"\n")
        out = []
        stop = False
        for line in lines:
            msg = loads(line)
            kind = msg.get("type")
            if kind == "item":
                d = dumps(msg["delivery"])
                out.append('{"type":"emit","delivery":%s,"payload":%s}\n{"type":"done","delivery":%s}\n'
                           % (d, dumps(msg.get("payload")), d))
            elif kind == "hello":
                out.append('{"type":"ready","window":%d}\n' % window if window else '{"type":"ready"}\n')
            elif kind == "shutdown":
                stop = True
                break
        data = "".join(out).encode()
        while data:
            data = data[os.write(outfd, data):]
        if stop:
            return 0


if __name__ == "__main__":
    sys.exit(main())
