#!/usr/bin/env python3
"""Echo on the millrace SDK: every item's payload out again, its key kept."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import millrace  # noqa: E402

millrace.map(lambda payload, item: payload)
