#!/usr/bin/env python3
"""The Python blocking action of BenchmarkWaiting: a call per record that blocks for
sys.argv[1] milliseconds (a stand-in for requests.get: time.sleep), then the payload out again,
its key kept; a plain handler on the millrace SDK, on a pool of sys.argv[2] threads."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
import millrace  # noqa: E402

CALL = float(sys.argv[1]) / 1000


def handle(payload, item):
    time.sleep(CALL)
    return payload


millrace.map(handle, threads=int(sys.argv[2]))
