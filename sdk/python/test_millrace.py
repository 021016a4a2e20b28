"""Tests of the Python SDK over real pipes: each test starts testdata/action.py as a child and
speaks the action protocol to it. Run: python3 -m unittest (in sdk/python)."""
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ACTION = os.path.join(HERE, "testdata", "action.py")
WAIT = 10  # seconds for any one line: a bound on a hang, not a speed target
MAX_LINE = 8 << 20  # stdio.MaxLineBytes


class Child:
    """One action process and its conversation."""

    def __init__(self, *args, env=None):
        e = dict(os.environ)
        e.pop("MILLSTREAM_WORKDIR", None)
        e.update(env or {})
        self.p = subprocess.Popen([sys.executable, ACTION, *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._read, args=(self.p.stdout, self.lines.put, True), daemon=True).start()
        self.err_thread = threading.Thread(target=self._read, args=(self.p.stderr, self.stderr.append, False), daemon=True)
        self.err_thread.start()
        self.seq = 0
        self.msgs = []  # messages of the last line read not yet returned
        self.frames = []  # per line read: "line", or "batch" and its message count

    @staticmethod
    def _read(f, put, mark_end):
        for line in f:
            put(line)
        if mark_end:
            put(None)

    def send(self, *msgs):
        self.p.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in msgs))
        self.p.stdin.flush()

    def send_batch(self, *msgs):
        """Writes msgs as one batch envelope, as the engine does for a run of items."""
        self.send({"type": "batch", "messages": list(msgs)})

    def raw_line(self):
        line = self.lines.get(timeout=WAIT)
        if line is None:
            raise AssertionError("stdout ended; stderr: %s" % b"".join(self.stderr).decode())
        if not line.endswith(b"\n"):
            raise AssertionError("a line without newline: %r" % line)
        if len(line) - 1 > MAX_LINE:
            raise AssertionError("a line of %d bytes, over the line limit" % (len(line) - 1))
        return line

    def read(self):
        """The next message, from a line of its own or from a batch envelope."""
        if not self.msgs:
            m = json.loads(self.raw_line())
            if m["type"] == "batch":
                self.frames.append(("batch", len(m["messages"])))
                self.msgs = list(m["messages"])
                if not self.msgs:
                    return self.read()
            else:
                self.frames.append(("line", 1))
                self.msgs = [m]
        return self.msgs.pop(0)

    def hello(self, config=None, **extra):
        self.send({"type": "hello", "protocol": 1, "action": "t", "config": config or {}, "vars": {"v": 1}, **extra})
        return self.read()

    def item(self, payload, key="k", **fields):
        self.seq += 1
        it = {"type": "item", "delivery": "dl-%d" % self.seq, "id": "t/0/%d" % self.seq, "payload": payload,
              "partition": 0, "offset": self.seq, "timestamp": 0, "attempt": 1, "idempotencyKey": "ik%d" % self.seq}
        if key is not None:
            it["key"] = key
        it.update(fields)
        return it

    def answer(self):
        """The lines of one delivery, up to its answer: (emits and metrics, answer)."""
        got = []
        while True:
            m = self.read()
            if m["type"] in ("done", "error", "abstain"):
                return got, m
            got.append(m)

    def answers(self, n):
        """The messages of n deliveries answered in any order: {delivery: (messages, answer)},
        each delivery answered exactly once, its messages before its answer."""
        got, order = {}, []
        msgs = {}
        while len(order) < n:
            m = self.read()
            d = m["delivery"]
            if d in got:
                raise AssertionError("a message for %s after its answer: %r" % (d, m))
            if m["type"] in ("done", "error", "abstain"):
                got[d] = (msgs.pop(d, []), m)
                order.append(d)
            else:
                msgs.setdefault(d, []).append(m)
        return got, order

    def ask(self, payload, **kw):
        it = self.item(payload, **kw)
        self.send(it)
        got, ans = self.answer()
        assert ans["delivery"] == it["delivery"], (ans, it)
        for m in got:
            assert m["delivery"] == it["delivery"], m
        return got, ans

    def shutdown(self):
        self.send({"type": "shutdown"})
        code = self.p.wait(timeout=WAIT)
        self.err_thread.join(WAIT)
        rest = []
        while True:
            line = self.lines.get(timeout=WAIT)
            if line is None:
                break
            rest.append(line)
        return code, rest

    def stderr_text(self):
        return b"".join(self.stderr).decode()

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            f.close()


class SDKTest(unittest.TestCase):
    def child(self, *args, **kw):
        c = Child(*args, **kw)
        self.addCleanup(c.close)
        return c

    def test_ready_declares_the_window_and_shutdown_exits_0(self):
        c = self.child("map")
        self.assertEqual(c.hello(), {"type": "ready", "window": 64, "batch": True})
        self.assertEqual(c.frames, [("line", 1)])  # ready: never in an envelope
        code, rest = c.shutdown()
        self.assertEqual(code, 0)
        self.assertEqual(rest, [])

    def test_end_of_stdin_exits_0(self):
        c = self.child("map")
        c.hello()
        c.p.stdin.close()
        self.assertEqual(c.p.wait(timeout=WAIT), 0)

    def test_answers_take_the_framing_of_their_items_in_the_fast_shapes(self):
        c = self.child("map")
        c.hello()
        c.send(c.item({"a": 1, "t": "é"}, key="k1"))
        self.assertEqual(c.raw_line(), '{"type":"emit","delivery":"dl-1","key":"k1","payload":{"a":1,"t":"é"}}\n'.encode())
        self.assertEqual(c.raw_line(), b'{"type":"done","delivery":"dl-1"}\n')
        c.send_batch(c.item({"a": 2}, key="k2"))
        self.assertEqual(c.raw_line(), (b'{"type":"batch","messages":['
                                        b'{"type":"emit","delivery":"dl-2","key":"k2","payload":{"a":2}},'
                                        b'{"type":"done","delivery":"dl-2"}]}\n'))
        got, ans = c.ask({"a": 2}, key=None)
        self.assertNotIn("key", got[0])
        self.assertEqual(got[0]["payload"], {"a": 2})

    def test_key_base64_is_decoded_and_kept(self):
        c = self.child("map")
        c.hello()
        got, ans = c.ask({"do": "key"}, key=None, keyBase64="/wA=",
                         headers=[{"key": "b", "valueBase64": "/g=="}, {"key": "t", "value": "v"}, {"key": "n"}])
        self.assertEqual(ans["type"], "done")
        self.assertEqual(got[0]["keyBase64"], "/wA=")
        self.assertNotIn("key", got[0])
        p = got[0]["payload"]
        self.assertEqual(p["key"], "ff00")
        self.assertEqual(p["headers"], [["b", "fe"], ["t", "v"], ["n", None]])
        self.assertEqual((p["id"], p["attempt"], p["idempotencyKey"]), ("t/0/1", 1, "ik1"))

    def test_map_keyed_keys_outlets_headers(self):
        c = self.child("keyed")
        c.hello()
        got, ans = c.ask({"x": 1}, key="item-key")
        self.assertEqual(ans, {"type": "done", "delivery": "dl-1"})
        self.assertEqual(len(got), 3)
        self.assertEqual(got[0]["key"], "a")
        self.assertNotIn("outlet", got[0])
        self.assertEqual(got[1]["keyBase64"], "/wA=")
        self.assertEqual(got[1]["outlet"], "other")
        self.assertEqual(got[1]["headers"], [{"key": "h", "valueBase64": "/g=="}, {"key": "t", "value": "v"}, {"key": "n"}])
        self.assertEqual(got[2]["key"], "item-key")
        got, ans = c.ask({"do": "none"})
        self.assertEqual((got, ans["type"]), ([], "done"))

    def test_abstain_retryable_and_exceptions_fail_the_item_not_the_process(self):
        c = self.child("map")
        c.hello()
        got, ans = c.ask({"do": "abstain"})
        self.assertEqual(ans, {"type": "abstain", "delivery": "dl-1", "reason": "unsure"})
        got, ans = c.ask({"do": "retry"})
        self.assertEqual((ans["type"], ans["retryable"]), ("error", True))
        self.assertIn("try again", ans["message"])
        got, ans = c.ask({"do": "raise"})
        self.assertEqual((ans["type"], ans["retryable"]), ("error", False))
        self.assertIn("ValueError: boom", ans["message"])
        self.assertIn("action.py", ans["message"])
        got, ans = c.ask({"do": "nan"})
        self.assertEqual(ans["type"], "error")
        self.assertEqual(got, [])
        got, ans = c.ask({"still": "alive"})
        self.assertEqual((ans["type"], got[0]["payload"]), ("done", {"still": "alive"}))
        self.assertEqual(c.shutdown()[0], 0)
        err = c.stderr_text()
        self.assertIn("Traceback (most recent call last)", err)
        self.assertIn('raise ValueError(\\"boom\\")', err)
        for line in err.splitlines():
            json.loads(line)  # every stderr line is a JSON log line

    def test_metric_with_labels_before_the_answer(self):
        c = self.child("map")
        c.hello()
        got, ans = c.ask({"do": "metric"})
        self.assertEqual(got[0], {"type": "metric", "delivery": "dl-1", "name": "m", "value": 2.5, "labels": {"l": "v"}})
        self.assertEqual(got[1]["type"], "emit")

    def test_a_window_of_lines_is_answered_on_lines_in_one_write(self):
        c = self.child("map")
        c.hello()
        items = [c.item({"i": i}) for i in range(8)]
        c.send(*items)
        for it in items:
            got, ans = c.answer()
            self.assertEqual((ans["type"], ans["delivery"]), ("done", it["delivery"]))
        self.assertEqual(c.frames[1:], [("line", 1)] * 16)

    def test_log_and_stray_print_go_to_stderr(self):
        c = self.child("map")
        c.hello()
        got, ans = c.ask({"do": "log"})
        got, ans = c.ask({"do": "print"})
        self.assertEqual([m["type"] for m in got], ["emit"])
        code, rest = c.shutdown()
        self.assertEqual((code, rest), (0, []))
        recs = [json.loads(line) for line in c.stderr_text().splitlines()]
        self.assertEqual(recs, [
            {"level": "INFO", "msg": "hello log", "n": 1, "delivery": "dl-1", "item": "t/0/1", "attempt": 1},
            {"level": "INFO", "msg": "stray print", "stream": "stdout", "delivery": "dl-2", "item": "t/0/2", "attempt": 1},
        ])

    def test_a_print_is_tagged_with_the_item_that_printed_it(self):
        c = self.child("map")
        c.hello()
        items = [c.item({"n": 1}), c.item({"do": "print"}), c.item({"do": "print"}, attempt=3)]
        c.send_batch(*items)
        for _ in items:
            c.answer()
        self.assertEqual(c.shutdown()[0], 0)
        recs = [json.loads(line) for line in c.stderr_text().splitlines()]
        self.assertEqual([(r["msg"], r["delivery"], r["item"], r["attempt"]) for r in recs],
                         [("stray print", "dl-2", "t/0/2", 1), ("stray print", "dl-3", "t/0/3", 3)])

    def test_workdir(self):
        with tempfile.TemporaryDirectory() as wd:
            c = self.child("map", env={"MILLSTREAM_WORKDIR": wd})
            c.hello()
            got, ans = c.ask({"do": "workdir"})
            self.assertEqual(got[0]["payload"], {"workdir": wd, "exists": True})

    def test_workdir_outside_the_engine_is_removed_at_exit(self):
        c = self.child("map")
        c.hello()
        got, ans = c.ask({"do": "workdir"})
        wd = got[0]["payload"]["workdir"]
        self.assertTrue(got[0]["payload"]["exists"])
        self.assertEqual(c.shutdown()[0], 0)
        self.assertFalse(os.path.exists(wd), wd)

    def test_config_typed(self):
        c = self.child("map")
        c.hello(config={"min-rooms": 3, "greeting": "hey", "ratio": 1})
        got, ans = c.ask({"do": "config"})
        self.assertEqual(got[0]["payload"], {"min_rooms": 3, "greeting": "hey", "ratio": 1.0})
        c = self.child("map")
        c.hello(config={})
        got, ans = c.ask({"do": "config"})
        self.assertEqual(got[0]["payload"], {"min_rooms": 2, "greeting": "hi", "ratio": 0.5})

    def test_bad_config_fails_each_item(self):
        c = self.child("map")
        self.assertEqual(c.hello(config={"min-rooms": "not-a-number", "greeting": 12345})["type"], "ready")
        for _ in range(2):
            got, ans = c.ask({"do": "config"})
            self.assertEqual((got, ans["type"], ans["retryable"]), ([], "error", False))
            self.assertIn("min-rooms", ans["message"])
            self.assertIn("greeting", ans["message"])
        self.assertEqual(c.shutdown()[0], 0)
        self.assertIn("bad config", c.stderr_text())

    def test_unknown_keys_and_types_are_ignored(self):
        c = self.child("map")
        self.assertEqual(c.hello(lessons=[{"x": 1}])["type"], "ready")
        c.send({"type": "future-thing", "x": 1})
        got, ans = c.ask({"a": 1}, artifacts=[], extra={"n": [1]})
        self.assertEqual((ans["type"], got[0]["payload"]), ("done", {"a": 1}))

    def test_window_written_ahead_answered_in_order(self):
        c = self.child("map")
        c.hello()
        items = [c.item({"i": i, "pad": "x" * 5000}) for i in range(64)]
        c.send(*items)
        for it in items:
            got, ans = c.answer()
            self.assertEqual(ans["delivery"], it["delivery"])
            self.assertEqual(got[0]["payload"]["i"], it["payload"]["i"])

    def test_answers_go_out_while_a_later_item_still_works(self):
        c = self.child("map")
        c.hello()
        with tempfile.TemporaryDirectory() as d:
            gate = os.path.join(d, "gate")
            slow, blocked = c.item({"do": "slow"}), c.item({"do": "gate", "path": gate})
            c.send(slow, blocked)
            got, ans = c.answer()  # would hang if answers waited for the whole run
            self.assertEqual((ans["type"], ans["delivery"]), ("done", slow["delivery"]))
            open(gate, "w").close()
            got, ans = c.answer()
            self.assertEqual((ans["type"], ans["delivery"]), ("done", blocked["delivery"]))

    def test_large_line_across_reads(self):
        c = self.child("map")
        c.hello()
        big = "é" * (3 << 20)
        got, ans = c.ask({"big": big})
        self.assertEqual(got[0]["payload"]["big"], big)

    def test_an_envelope_is_answered_in_one_envelope_in_order(self):
        c = self.child("map")
        c.hello()
        items = [c.item({"i": i, "t": "é\u2028"}, key=None if i % 3 == 0 else "k%d" % i) for i in range(64)]
        items[6]["payload"] = {"do": "abstain"}  # (a traceback to log could take the 50 ms)
        c.send_batch(*items)
        for n, it in enumerate(items):
            got, ans = c.answer()
            self.assertEqual(ans["delivery"], it["delivery"])
            if n == 6:
                self.assertEqual((ans["type"], got), ("abstain", []))
            else:
                self.assertEqual((ans["type"], got[0]["payload"], got[0].get("key")), ("done", it["payload"], it.get("key")))
        self.assertEqual(c.frames, [("line", 1), ("batch", 127)])  # ready, then one write

    def test_envelopes_and_lines_mixed_with_other_messages(self):
        c = self.child("map")
        c.hello()
        a, b, d, e = c.item({"n": 1}), c.item({"n": 2}), c.item({"n": 3}), c.item({"n": 4})
        # one write: each answered in its own framing, in order
        c.p.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in [
            {"type": "batch", "messages": []},  # empty: nothing
            a, {"type": "batch", "messages": [b, {"type": "future-thing"}, d]}, e]))
        c.p.stdin.flush()
        c.send_batch({"type": "shutdown"})
        for it in (a, b, d, e):
            got, ans = c.answer()
            self.assertEqual((ans["type"], ans["delivery"], got[0]["payload"]), ("done", it["delivery"], it["payload"]))
        self.assertEqual(c.p.wait(timeout=WAIT), 0)
        self.assertEqual(c.frames, [("line", 1)] * 3 + [("batch", 4)] + [("line", 1)] * 2)

    def test_answers_over_the_line_limit_are_split_across_lines(self):
        c = self.child("map")
        c.hello()
        big = [c.item({"big": "x" * (3 << 20), "i": i}) for i in range(3)]
        c.send_batch(*big)
        for it in big:
            got, ans = c.answer()
            self.assertEqual((ans["type"], ans["delivery"], got[0]["payload"]["i"]), ("done", it["delivery"], it["payload"]["i"]))
        # raw_line checked each line against the limit; the 50 ms flush may cut earlier too
        self.assertGreaterEqual(len(c.frames[1:]), 2)
        self.assertEqual(sum(n for _, n in c.frames[1:]), 6)

    def test_frame_packs_envelopes_up_to_the_line_limit(self):
        sys.path.insert(0, HERE)
        import millrace

        m = lambda n: '"%s"' % ("x" * (n - 2))  # noqa: E731 (a JSON string of n bytes)
        head, tail = len('{"type":"batch","messages":['), len("]}")
        cases = [  # message sizes -> the framing of each line out
            ([10], ["line"]),
            ([10, 20], [("batch", 2)]),
            ([3 << 20, 3 << 20, 3 << 20], [("batch", 2), "line"]),
            ([MAX_LINE - head - tail - 3, 2], [("batch", 2)]),  # exactly the limit
            ([MAX_LINE - head - tail - 3, 3], ["line", "line"]),
            ([5, MAX_LINE - 5, 7, 8], ["line", "line", ("batch", 2)]),
            ([MAX_LINE], ["line"]),
        ]
        for sizes, want in cases:
            data = millrace._frame([m(n) for n in sizes])
            lines = data.split(b"\n")
            self.assertEqual(lines[-1], b"")
            got, seen = [], []
            for line in lines[:-1]:
                self.assertLessEqual(len(line), MAX_LINE, sizes)
                v = json.loads(line)
                if isinstance(v, dict):
                    got.append(("batch", len(v["messages"])))
                    seen.extend(len(x) + 2 for x in v["messages"])
                else:
                    got.append("line")
                    seen.append(len(v) + 2)
            self.assertEqual((got, seen), (want, sizes), sizes)

    def test_an_answer_near_the_line_limit_goes_on_a_line_of_its_own(self):
        c = self.child("map")
        c.hello()
        small = c.item({"n": 1})
        # an emit line 10 bytes under the limit: too long for an envelope with anything else
        frame = len('{"type":"emit","delivery":"dl-2","key":"k","payload":{"s":""}}')
        near = c.item({"s": "y" * (MAX_LINE - 10 - frame)})
        c.send_batch(small, near, c.item({"n": 3}))
        msgs, near_line = [], None
        while len(msgs) < 6:  # the 50 ms flush may cut the rest anywhere: look at that line only
            line = c.raw_line()
            v = json.loads(line)
            if v["type"] == "batch":
                msgs.extend((m["type"], m["delivery"]) for m in v["messages"])
                continue
            msgs.append((v["type"], v["delivery"]))
            if v["delivery"] == "dl-2" and v["type"] == "emit":
                near_line = line
        self.assertEqual(msgs, [(t, "dl-%d" % n) for n in (1, 2, 3) for t in ("emit", "done")])
        self.assertEqual(len(near_line or b""), MAX_LINE - 10 + 1)

    def test_an_output_over_the_line_limit_fails_its_item_not_the_process(self):
        c = self.child("map")
        c.hello()
        got, ans = c.ask({"s": "z" * MAX_LINE})
        self.assertEqual((got, ans["type"], ans["retryable"]), ([], "error", False))
        self.assertIn("over the 8388608-byte line limit", ans["message"])
        got, ans = c.ask({"still": "alive"})
        self.assertEqual(ans["type"], "done")

    def test_an_envelope_answers_go_out_while_a_later_item_still_works(self):
        c = self.child("map")
        c.hello()
        with tempfile.TemporaryDirectory() as d:
            gate = os.path.join(d, "gate")
            slow, blocked = c.item({"do": "slow"}), c.item({"do": "gate", "path": gate})
            c.send_batch(slow, blocked)
            got, ans = c.answer()  # would hang if answers waited for the whole envelope
            self.assertEqual((ans["type"], ans["delivery"]), ("done", slow["delivery"]))
            open(gate, "w").close()
            got, ans = c.answer()
            self.assertEqual((ans["type"], ans["delivery"]), ("done", blocked["delivery"]))

    def test_batch_handler_gets_an_envelope_without_the_linger(self):
        c = self.child("batch", "4", "30")  # a linger no test waits for
        c.hello()
        items = [c.item({"i": i}) for i in range(10)]
        c.send_batch(*items)
        sizes = []
        for it in items:
            got, ans = c.answer()
            self.assertEqual((ans["type"], ans["delivery"]), ("done", it["delivery"]))
            sizes.append([m for m in got if m["type"] == "emit"][0]["payload"]["n"])
        self.assertEqual(sizes, [4] * 8 + [2] * 2)
        self.assertEqual(c.frames[1:], [("batch", 30)])  # 10 items: a metric, an emit, a done each

    def test_batch_gets_what_was_written_ahead(self):
        c = self.child("batch", "8", "0.2")
        self.assertEqual(c.hello(), {"type": "ready", "window": 64, "batch": True})
        items = [c.item({"i": i}) for i in range(10)]
        items[2]["payload"] = {"do": "raise"}
        items[3]["payload"] = {"do": "abstain"}
        c.send(*items)
        sizes = []
        for n, it in enumerate(items):
            got, ans = c.answer()
            self.assertEqual(ans["delivery"], it["delivery"])
            if n == 2:
                self.assertEqual((ans["type"], ans["retryable"]), ("error", False))
                self.assertIn("ValueError: bad item", ans["message"])
            elif n == 3:
                self.assertEqual(ans, {"type": "abstain", "delivery": it["delivery"], "reason": "not this one"})
            else:
                self.assertEqual(ans["type"], "done")
                emits = [m for m in got if m["type"] == "emit"]
                self.assertEqual(len(emits), 1)
                sizes.append(emits[0]["payload"]["n"])
        # 8 in the first batch, the 2 left after the linger
        self.assertEqual(sizes, [8] * 6 + [2, 2])

    def test_batch_linger_runs_a_partial_batch(self):
        c = self.child("batch", "64", "0.05")
        c.hello()
        c.send(c.item({"i": 0}), c.item({"i": 1}))
        got, ans = c.answer()
        self.assertEqual([m["type"] for m in got], ["metric", "metric", "emit"])
        self.assertEqual((ans["type"], got[2]["payload"]), ("done", {"n": 2, "i": 0}))
        self.assertEqual(got[1]["delivery"], "dl-2")

    def test_batch_handler_raising_fails_every_item(self):
        c = self.child("batch", "4", "0.05")
        c.hello()
        items = [c.item({"i": 0}), c.item({"do": "boom-all"})]
        c.send(*items)
        for it in items:
            got, ans = c.answer()
            self.assertEqual((got, ans["type"], ans["delivery"]), ([], "error", it["delivery"]))
            self.assertIn("RuntimeError: the whole batch", ans["message"])
        self.assertEqual(c.shutdown()[0], 0)
        self.assertIn("Traceback", c.stderr_text())

    def test_batch_wrong_result_count_fails_the_batch(self):
        c = self.child("batch-short")
        c.hello()
        items = [c.item({"i": i}) for i in range(4)]
        c.send(*items)
        for it in items:
            got, ans = c.answer()
            self.assertEqual(ans["type"], "error")
            self.assertIn("returned 3 results for 4 items", ans["message"])

    def test_shutdown_answers_a_pending_batch_first(self):
        c = self.child("batch", "64", "5")
        c.hello()
        it = c.item({"i": 0})
        c.send(it, {"type": "shutdown"})
        got, ans = c.answer()
        self.assertEqual(ans["type"], "done")
        self.assertEqual(c.p.wait(timeout=WAIT), 0)

    def test_end_of_stdin_answers_a_pending_batch_first(self):
        c = self.child("batch", "64", "5")
        c.hello()
        c.send(c.item({"i": 0}))
        c.p.stdin.close()
        got, ans = c.answer()
        self.assertEqual(ans["type"], "done")
        self.assertEqual(c.p.wait(timeout=WAIT), 0)

    # -- state per key

    STATEFUL = {"events": {"ttl": "720h0m0s", "maxBytes": 64}}

    def test_ready_declares_state_only_when_hello_names_a_stateful_inlet(self):
        c = self.child("map")
        self.assertEqual(c.hello(state=self.STATEFUL), {"type": "ready", "window": 64, "batch": True, "state": True})
        c = self.child("map")
        self.assertEqual(c.hello(state={}), {"type": "ready", "window": 64, "batch": True})

    def test_state_is_read_and_written_before_done_in_the_fast_shape(self):
        c = self.child("map")
        c.hello(state=self.STATEFUL)
        c.send(c.item({"do": "count"}, key="u-7", inlet="events", state={"n": 4}))
        self.assertEqual(c.raw_line(), b'{"type":"emit","delivery":"dl-1","key":"u-7","payload":{"n":5,"was":{"n":4}}}\n')
        self.assertEqual(c.raw_line(), b'{"type":"state","delivery":"dl-1","state":{"n":5}}\n')
        self.assertEqual(c.raw_line(), b'{"type":"done","delivery":"dl-1"}\n')
        got, ans = c.ask({"do": "count"}, key="u-7", inlet="events")  # no state: a first record
        self.assertEqual([m["type"] for m in got], ["emit", "state"])
        self.assertEqual((got[0]["payload"], got[1]["state"], ans["type"]), ({"n": 1, "was": None}, {"n": 1}, "done"))
        got, ans = c.ask({"x": 1}, key="u-7", inlet="events", state={"n": 1})  # not set: left alone
        self.assertEqual(([m["type"] for m in got], ans["type"]), (["emit"], "done"))

    def test_clear_state_writes_null_and_the_last_call_wins(self):
        c = self.child("map")
        c.hello(state=self.STATEFUL)
        got, ans = c.ask({"do": "clear"}, inlet="events", state="s")
        self.assertEqual(got[1], {"type": "state", "delivery": "dl-1", "state": None})
        self.assertEqual((got[0]["payload"], ans["type"]), ({"was": "s"}, "done"))
        got, ans = c.ask({"do": "set-state", "state": None}, inlet="events")
        self.assertEqual((got[1]["state"], ans["type"]), (None, "done"))

    def test_a_failing_handler_stages_nothing(self):
        c = self.child("map")
        c.hello(state=self.STATEFUL)
        got, ans = c.ask({"do": "count-raise"}, inlet="events", state={"n": 1})
        self.assertEqual((got, ans["type"], ans["retryable"]), ([], "error", False))
        self.assertIn("failed after staging", ans["message"])

    def test_a_refused_state_fails_the_item_with_the_engines_words_even_if_caught(self):
        c = self.child("map")
        c.hello(state=self.STATEFUL)
        cases = [
            ({"key": None, "inlet": "events", "id": "events/0/17"}, {"n": 1},
             "item events/0/17 has no key, so it has no state: a state message is only for keyed records "
             "(route keyless ones elsewhere, or stage no state for them)"),
            ({"inlet": "audit"}, {"n": 1},
             "inlet audit keeps no state: add --state audit to the action line, or stage no state for its items"),
            ({"key": "u-7", "inlet": "events"}, "x" * 63,
             'the state staged for key "u-7" is 65 bytes, over max-bytes 64 bytes (--state events,max-bytes=…): '
             "keep less per key, or raise max-bytes (at most 1 MiB)"),
        ]
        for fields, state, want in cases:
            for ignore in (False, True):
                got, ans = c.ask({"do": "set-state", "state": state, "ignore": ignore}, **fields)
                self.assertEqual(ans, {"type": "error", "delivery": ans["delivery"], "message": want, "retryable": False})
                self.assertNotIn("state", [m["type"] for m in got])  # emits, if any, the engine drops
        it = c.item({"do": "set-state", "state": 1}, inlet="events")
        it["key"] = None  # "key": null is no key either
        c.send(it)
        self.assertIn("has no key, so it has no state", c.answer()[1]["message"])
        got, ans = c.ask({"do": "set-state", "state": "x" * 62}, inlet="events")  # 64 bytes: at the limit
        self.assertEqual((got[1]["state"], ans["type"]), ("x" * 62, "done"))
        got, ans = c.ask({"do": "set-state", "state": "x" * 63}, keyBase64="/w==", key=None, inlet="events")
        self.assertIn('key "/w==" is 65 bytes', ans["message"])

    def test_without_state_in_hello_every_inlet_keeps_none(self):
        c = self.child("map")
        c.hello()
        got, ans = c.ask({"do": "count"}, inlet="events")
        self.assertEqual(ans["message"], "inlet events keeps no state: add --state events to the action line, or stage no state for its items")

    def test_a_batch_handler_stages_each_items_state_in_the_envelope(self):
        c = self.child("batch", "8", "5")
        c.hello(state={"events": {"maxBytes": 65536}})
        c.send_batch(c.item({"do": "count"}, key="a", inlet="events", state={"n": 1}),
                     c.item({"do": "raise"}, key="b", inlet="events"),
                     c.item({"do": "count"}, key="c", inlet="events"))
        msgs = [c.read() for _ in range(7)]
        self.assertEqual(c.frames, [("line", 1), ("batch", 7)])
        self.assertEqual([(m["type"], m["delivery"]) for m in msgs],
                         [("emit", "dl-1"), ("state", "dl-1"), ("done", "dl-1"), ("error", "dl-2"),
                          ("emit", "dl-3"), ("state", "dl-3"), ("done", "dl-3")])
        self.assertEqual((msgs[1]["state"], msgs[5]["state"]), ({"n": 2}, {"n": 1}))

    # -- concurrent handlers

    def test_ready_declares_concurrency_only_for_a_concurrent_handler(self):
        c = self.child("async")
        self.assertEqual(c.hello(), {"type": "ready", "window": 128, "batch": True, "concurrent": True, "cancel": True})
        c = self.child("async", "8")
        self.assertEqual(c.hello()["window"], 8)
        c = self.child("threads", "3")  # a window of twice the threads
        self.assertEqual(c.hello(state=self.STATEFUL),
                         {"type": "ready", "window": 6, "batch": True, "concurrent": True, "cancel": True, "state": True})
        c = self.child("async-batch", "4", "0.01")
        self.assertEqual(c.hello()["concurrent"], True)

    def test_async_answers_as_each_completes_each_exactly_once(self):
        c = self.child("async")
        c.hello()
        # each item ends only after the next one: the answers come reversed, and only if they run at once
        items = [c.item({"do": "after", "tag": i, "after": i + 1 if i < 39 else None}, key="k%d" % i) for i in range(40)]
        c.send_batch(*items)
        got, order = c.answers(len(items))
        self.assertEqual(sorted(order), sorted(it["delivery"] for it in items))
        self.assertEqual(order, [it["delivery"] for it in reversed(items)])
        for it in items:
            msgs, ans = got[it["delivery"]]
            self.assertEqual((ans["type"], [m["type"] for m in msgs]), ("done", ["emit"]))
            self.assertEqual((msgs[0]["payload"], msgs[0]["key"]), (it["payload"], it["key"]))
        self.assertTrue(all(f[0] == "batch" for f in c.frames[1:]), c.frames)  # an envelope's answers: envelopes
        c.send(c.item({"x": 1}))  # an item on a line: answered on lines
        got, order = c.answers(1)
        self.assertEqual(c.frames[-2:], [("line", 1), ("line", 1)])
        self.assertEqual(c.shutdown()[0], 0)

    def test_async_a_later_item_is_answered_while_an_earlier_one_waits(self):
        c = self.child("async")
        c.hello()
        with tempfile.TemporaryDirectory() as d:
            gates = [os.path.join(d, "g%d" % i) for i in range(3)]
            items = [c.item({"do": "gate", "path": g}) for g in gates]
            c.send(*items)
            for i in (2, 0, 1):  # each answer waits for its own gate, whatever the arrival order
                open(gates[i], "w").close()
                got, order = c.answers(1)
                self.assertEqual(order, [items[i]["delivery"]])

    def test_async_in_flight_never_exceeds_the_window(self):
        c = self.child("async", "5")
        c.hello()
        items = [c.item({"do": "fill"}) for _ in range(23)]  # each waits until 5 are in flight
        c.send_batch(*items)
        got, order = c.answers(len(items))
        self.assertEqual({a["type"] for _, a in got.values()}, {"done"})
        got, ans = c.ask({"do": "status"})
        self.assertEqual(got[0]["payload"]["peak"], 5)

    def test_async_cancel_answers_only_the_hung_item(self):
        c = self.child("async", "64")
        c.hello()
        # 1 hung call among 1,000 at 64 in flight (the SDK holds back what is over its window)
        items = [c.item({"i": i}, key="k%d" % (i % 97)) for i in range(999)]
        hung = c.item({"do": "hang"})
        items.insert(7, hung)
        for n in range(0, len(items), 100):
            c.send_batch(*items[n:n + 100])
        got, order = c.answers(len(items) - 1)
        self.assertEqual({a["type"] for _, a in got.values()}, {"done"})
        self.assertNotIn(hung["delivery"], got)
        c.send({"type": "cancel", "delivery": hung["delivery"]})
        got, order = c.answers(1)
        msgs, ans = got[hung["delivery"]]
        self.assertEqual((msgs, ans["type"], ans["retryable"]), ([], "error", True))
        self.assertTrue(ans["message"].startswith("cancelled: "), ans)
        # a cancel for a delivery answered already, or never held, is ignored
        c.send({"type": "cancel", "delivery": hung["delivery"]}, {"type": "cancel", "delivery": "dl-none"})
        got, ans = c.ask({"do": "status"})
        self.assertEqual(got[0]["payload"]["cancelled"], [hung["delivery"]])  # the task saw it
        self.assertEqual(c.shutdown(), (0, []))

    def test_async_cancel_inside_an_envelope_and_of_a_waiting_item(self):
        c = self.child("async", "2")
        c.hello()
        a, b, w = c.item({"do": "hang"}), c.item({"do": "hang"}), c.item({"x": "waits"})
        c.send_batch(a, b, w)  # the window (2) is full: w waits for a slot
        c.send_batch({"type": "cancel", "delivery": a["delivery"]})
        got, order = c.answers(2)  # a cancelled, then w runs in its slot
        self.assertEqual(order, [a["delivery"], w["delivery"]])
        self.assertEqual(got[w["delivery"]][1]["type"], "done")
        c.send({"type": "cancel", "delivery": b["delivery"]})
        got, order = c.answers(1)
        self.assertEqual((order, got[b["delivery"]][1]["retryable"]), ([b["delivery"]], True))

    def test_async_prints_and_logs_are_tagged_with_their_own_delivery(self):
        c = self.child("async")
        c.hello()
        with tempfile.TemporaryDirectory() as d:
            ga, gb = os.path.join(d, "a"), os.path.join(d, "b")
            a, b = c.item({"do": "talk", "path": ga}), c.item({"do": "talk", "path": gb}, attempt=2)
            c.send(a, b)
            open(gb, "w").close()  # b ends before a
            c.answers(1)
            open(ga, "w").close()
            c.answers(1)
        self.assertEqual(c.shutdown()[0], 0)
        recs = [json.loads(line) for line in c.stderr_text().splitlines()]
        self.assertEqual(len(recs), 8, recs)
        for r in recs:
            self.assertTrue(r["msg"].endswith(r["item"]) or r["msg"].startswith("part of " + r["item"]), r)
            self.assertEqual(r["attempt"], 2 if r["item"] == b["id"] else 1, r)
        self.assertIn({"level": "WARN", "msg": "logging of " + b["id"], "logger": "root", "delivery": b["delivery"],
                       "item": b["id"], "attempt": 2}, recs)
        self.assertIn("part of %s ends" % a["id"], [r["msg"] for r in recs])

    def test_async_state_retry_abstain_metrics(self):
        c = self.child("async")
        c.hello(state=self.STATEFUL)
        items = [c.item({"do": "count"}, key="k%d" % i, inlet="events", state={"n": i}) for i in range(10)]
        items += [c.item({"do": "retry"}), c.item({"do": "abstain"}), c.item({"do": "raise"})]
        c.send_batch(*items)
        got, order = c.answers(len(items))
        for i, it in enumerate(items[:10]):
            msgs, ans = got[it["delivery"]]
            self.assertEqual([m["type"] for m in msgs], ["metric", "emit", "state"])
            self.assertEqual((msgs[1]["payload"], msgs[2]["state"], ans["type"]), ({"n": i + 1}, {"n": i + 1}, "done"))
        self.assertEqual(got[items[10]["delivery"]][1]["retryable"], True)
        self.assertEqual(got[items[11]["delivery"]][1], {"type": "abstain", "delivery": items[11]["delivery"], "reason": "unsure"})
        self.assertIn("ValueError: boom", got[items[12]["delivery"]][1]["message"])
        self.assertEqual(got[items[12]["delivery"]][1]["retryable"], False)

    def test_async_map_keyed(self):
        c = self.child("async-keyed")
        c.hello()
        got, ans = c.ask({"x": 1}, key="k")
        self.assertEqual(([m["key"] for m in got], ans["type"]), (["a", "k"], "done"))

    def test_async_batches_run_at_once_each_item_answered(self):
        c = self.child("async-batch", "4", "30")
        self.assertEqual(c.hello(state={"events": {"maxBytes": 100}})["window"], 128)
        with tempfile.TemporaryDirectory() as d:
            gate = os.path.join(d, "g")
            items = [c.item({"do": "gate", "path": gate})] + [c.item({"i": i}) for i in range(7)]
            items[5] = c.item({"do": "count"}, key="x", inlet="events", state={"n": 4})
            items[6] = c.item({"do": "raise"})
            items[7] = c.item({"do": "abstain"})
            c.send_batch(*items)
            got, order = c.answers(4)  # the second batch (4 of 8) is answered, the first waits
            self.assertEqual(order, [it["delivery"] for it in items[4:]])
            msgs, ans = got[items[5]["delivery"]]
            self.assertEqual(([m["type"] for m in msgs], msgs[1]["state"]), (["emit", "state"], {"n": 5}))
            self.assertIn("ValueError: bad item", got[items[6]["delivery"]][1]["message"])
            self.assertEqual(got[items[7]["delivery"]][1]["type"], "abstain")
            self.assertEqual([m["type"] for m in got[items[4]["delivery"]][0]], ["metric", "emit"])
            open(gate, "w").close()
            got, order = c.answers(4)
            self.assertEqual(order, [it["delivery"] for it in items[:4]])
        self.assertEqual(c.frames[1:], [("batch", 8), ("batch", 12)])
        c.send(c.item({"i": 9}), c.item({"i": 10}))  # lines: the linger is 30 s, so the shutdown runs them
        c.send({"type": "shutdown"})
        got, order = c.answers(2)
        self.assertEqual(c.p.wait(timeout=WAIT), 0)

    def test_async_batch_cancel_of_one_item_of_a_batch(self):
        c = self.child("async-batch", "2", "5")
        c.hello()
        a, b = c.item({"do": "hang"}), c.item({"i": 1})
        c.send_batch(a, b)
        c.send({"type": "cancel", "delivery": b["delivery"]})  # b's batch hangs on a
        got, order = c.answers(1)
        self.assertEqual((order, got[b["delivery"]][1]["retryable"]), ([b["delivery"]], True))
        c.send({"type": "cancel", "delivery": a["delivery"]})  # now the whole batch: its task ends
        got, order = c.answers(1)
        self.assertEqual(order, [a["delivery"]])
        got, ans = c.ask({"i": 2})
        self.assertEqual(ans["type"], "done")

    def test_shutdown_and_end_of_stdin_answer_what_is_in_flight(self):
        for end in ("shutdown", "eof"):
            c = self.child("async")
            c.hello()
            items = [c.item({"do": "sleep", "ms": 30}) for _ in range(5)]
            c.send(*items)
            if end == "shutdown":
                c.send({"type": "shutdown"})
            else:
                c.p.stdin.close()
            got, order = c.answers(5)
            self.assertEqual(c.p.wait(timeout=WAIT), 0)

    def test_a_plain_handler_stays_sequential(self):
        c = self.child("map")
        self.assertNotIn("concurrent", c.hello())
        with tempfile.TemporaryDirectory() as d:
            gate = os.path.join(d, "gate")
            a, b = c.item({"do": "gate", "path": gate}), c.item({"fast": 1})
            c.send(a, b)
            open(gate, "w").close()
            got, order = c.answers(2)
            self.assertEqual(order, [a["delivery"], b["delivery"]])

    def test_a_plain_handler_returning_a_coroutine_says_how_to_fix_it(self):
        c = self.child("returns-coroutine")
        c.hello()
        got, ans = c.ask({"x": 1})
        self.assertEqual((ans["type"], ans["retryable"]), ("error", False))
        self.assertIn("declare it `async def`", ans["message"])
        self.assertEqual(c.shutdown()[0], 0)
        self.assertNotIn("never awaited", c.stderr_text())

    def test_threads_run_blocking_handlers_at_once(self):
        c = self.child("threads", "4")
        c.hello(state=self.STATEFUL)
        items = [c.item({"do": "barrier"}) for _ in range(8)]  # passes only 4 at a time
        items += [c.item({"do": "print"}), c.item({"do": "count"}, inlet="events", state={"n": 1})]
        c.send_batch(*items)
        got, order = c.answers(len(items))
        self.assertEqual({a["type"] for _, a in got.values()}, {"done"})
        msgs, ans = got[items[-1]["delivery"]]
        self.assertEqual(msgs[1], {"type": "state", "delivery": items[-1]["delivery"], "state": {"n": 2}})
        got, ans = c.ask({"do": "status"})
        self.assertEqual(got[0]["payload"]["peak"], 4)
        self.assertEqual(c.shutdown()[0], 0)
        recs = [json.loads(line) for line in c.stderr_text().splitlines()]
        self.assertEqual([(r["msg"], r["delivery"]) for r in recs],
                         [("thread print " + items[8]["id"], items[8]["delivery"])])

    def test_threads_cancel_abandons_a_hung_call(self):
        c = self.child("threads", "2")
        c.hello()
        hung = c.item({"do": "hang"})
        c.send(hung)
        c.send({"type": "cancel", "delivery": hung["delivery"]})
        got, order = c.answers(1)
        self.assertEqual((order, got[hung["delivery"]][1]["retryable"]), ([hung["delivery"]], True))
        got, ans = c.ask({"x": 1})  # the other thread serves on
        self.assertEqual(ans["type"], "done")
        self.assertEqual(c.shutdown()[0], 0)

    def test_threads_batch(self):
        c = self.child("threads-batch")
        c.hello()
        items = [c.item({"i": i}) for i in range(6)]
        c.send_batch(*items)
        got, order = c.answers(6)
        self.assertEqual(sorted(order), sorted(it["delivery"] for it in items))

    def test_bad_threads_and_window_are_refused_with_the_way_out(self):
        sys.path.insert(0, HERE)
        import millrace

        async def h(payload, item):
            return payload

        with self.assertRaisesRegex(ValueError, "drop threads="):
            millrace.map(h, threads=4)
        with self.assertRaisesRegex(ValueError, "threads must be a whole number"):
            millrace.map(lambda p, i: p, threads=0)
        with self.assertRaisesRegex(ValueError, "window must be"):
            millrace.map(h, window=0)
        self.assertTrue(millrace._is_async(h))
        import functools

        self.assertTrue(millrace._is_async(functools.partial(h, 1)))

        class C:
            async def __call__(self, payload, item):
                return payload

            async def m(self, payload, item):
                return payload

        self.assertTrue(millrace._is_async(C()))
        self.assertTrue(millrace._is_async(C().m))
        self.assertFalse(millrace._is_async(len))
        self.assertFalse(millrace._is_async(lambda p, i: p))


if __name__ == "__main__":
    unittest.main()
