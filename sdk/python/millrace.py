"""millrace: write a Millstream action in Python (standard library only, one file).

An action reads items on stdin and answers on stdout, one JSON line each (docs/protocol.md).
This module speaks that protocol for you, so an action is one call::

    import millrace

    def handle(payload, item):
        if "surface" not in payload:
            raise millrace.Abstain("no surface area")
        item.metric("rooms", payload["rooms"], {"city": payload.get("city", "?")})
        return {"id": payload["id"], "score": 3 * payload["rooms"]}

    millrace.map(handle)

- ``map(fn)``: ``fn(payload, item)`` returns one output, which keeps the item's key.
- ``map_keyed(fn)``: ``fn(payload, item)`` returns a list of outputs (zero, one or several),
  each a plain value (the item's key) or an ``Output(value, key=..., outlet=..., headers=...)``.
- ``batch(fn, size=64, linger=0.005)``: ``fn(items)`` gets a list of ``Item`` (what the engine
  wrote ahead: up to ``size``, or what arrived within ``linger`` seconds) and returns one result
  per item, in order: a value (one output; with ``keyed=True`` a list of outputs) or an
  exception instance, which fails that item alone.
- ``raise Abstain(reason)``: hand the item to the step's fallback. ``raise Retryable(msg)``:
  fail the attempt, to be retried with backoff. Any other exception fails the item for good,
  its traceback logged to stderr; the process keeps serving.
- ``item.metric(name, value, labels)``, ``item.log`` / ``log`` (JSON lines on stderr),
  ``item.config`` (the config of hello, checked against ``config=`` when given: a dataclass,
  or a callable that validates the raw dict), ``workdir()`` (MILLSTREAM_WORKDIR).

The SDK declares a window of 64 deliveries in ready, reads stdin in chunks and writes its
answers once per run of them, so an action streams at its defaults. Anything printed to stdout
goes to stderr instead: stdout carries protocol lines only. ``shutdown`` or the end of stdin
exits with status 0.
"""

import atexit
import dataclasses
import json
import math
import os
import select
import shutil
import sys
import tempfile
import time
import traceback
import typing
from base64 import b64decode, b64encode

__all__ = [
    "map", "map_keyed", "batch", "Output", "Item", "Abstain", "Retryable", "ConfigError",
    "log", "workdir", "WINDOW",
]
__version__ = "0.1.0"

WINDOW = 64
"""Deliveries the SDK accepts written ahead, declared in its ready line."""

_READ_SIZE = 1 << 16
_FLUSH_AFTER = 0.05  # seconds: answers of a slow run still go out this often

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_loads = json.loads


class Abstain(Exception):
    """Raise to answer the delivery with abstain: the engine routes the item to the fallback."""

    def __init__(self, reason=""):
        super().__init__(reason)
        self.reason = str(reason)


class Retryable(Exception):
    """Raise to fail this attempt with a retryable error: the engine retries with backoff."""


class ConfigError(ValueError):
    """The config of hello does not fit the declared config; every item fails with it."""


class Output:
    """One output of map_keyed or a keyed batch.

    key None keeps the item's key; a str or bytes sets it (bytes that are not UTF-8 travel as
    keyBase64). outlet may be left None when the action has one outlet. headers is a list of
    (key, value) pairs or a dict; a value is str, bytes or None.
    """

    __slots__ = ("value", "key", "outlet", "headers")

    def __init__(self, value, key=None, outlet=None, headers=None):
        self.value, self.key, self.outlet, self.headers = value, key, outlet, headers

    def __repr__(self):
        return "Output(%r, key=%r, outlet=%r, headers=%r)" % (self.value, self.key, self.outlet, self.headers)


class _Log:
    """Structured logging to stderr: one JSON object per line, which the engine re-emits with
    its own fields (level and msg are read as such)."""

    __slots__ = ("_fields",)

    def __init__(self, fields=None):
        self._fields = fields or {}

    def bind(self, **fields):
        """A logger adding fields to every line."""
        return _Log({**self._fields, **fields})

    def _write(self, level, msg, fields):
        rec = {"level": level, "msg": str(msg)}
        rec.update(self._fields)
        rec.update(fields)
        try:
            line = json.dumps(rec, ensure_ascii=False, default=str)
        except ValueError:
            line = json.dumps({"level": level, "msg": str(msg), "fields": repr(fields)})
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def debug(self, msg, **fields):
        self._write("DEBUG", msg, fields)

    def info(self, msg, **fields):
        self._write("INFO", msg, fields)

    def warning(self, msg, **fields):
        self._write("WARN", msg, fields)

    warn = warning

    def error(self, msg, **fields):
        self._write("ERROR", msg, fields)

    def exception(self, msg, **fields):
        """error, with the traceback of the exception being handled."""
        self._write("ERROR", msg, {**fields, "traceback": traceback.format_exc()})


log = _Log()
"""The action's logger (JSON lines on stderr); item.log adds the delivery, item and attempt."""

_workdir = None


def workdir():
    """The process's working directory for files (MILLSTREAM_WORKDIR, removed by the engine
    after the process exits). Outside the engine, a temporary folder removed at exit."""
    global _workdir
    wd = os.environ.get("MILLSTREAM_WORKDIR")
    if wd:
        return wd
    if _workdir is None:
        _workdir = tempfile.mkdtemp(prefix="millrace-workdir-")
        atexit.register(shutil.rmtree, _workdir, True)
    return _workdir


def _bytes_or_text(text, b64):
    if text is not None:
        return text
    if b64:
        return b64decode(b64)
    return None


class Item:
    """One delivery: its payload, key (str; bytes when it is not UTF-8; None when absent),
    headers ([(key, value)], value str, bytes or None) and the item fields of the protocol.
    raw is the whole item line as decoded, unknown keys included."""

    __slots__ = ("raw", "payload", "delivery", "_s", "_log")

    def __init__(self, session, raw):
        self._s, self.raw, self._log = session, raw, None
        self.payload = raw.get("payload")
        self.delivery = raw.get("delivery", "")

    @property
    def key(self):
        return _bytes_or_text(self.raw.get("key"), self.raw.get("keyBase64"))

    @property
    def headers(self):
        return [(h.get("key", ""), _bytes_or_text(h.get("value"), h.get("valueBase64")))
                for h in self.raw.get("headers") or ()]

    id = property(lambda self: self.raw.get("id", ""), doc="The item's stable id, the same on every attempt.")
    attempt = property(lambda self: self.raw.get("attempt", 1), doc="The attempt number, from 1.")
    idempotency_key = property(lambda self: self.raw.get("idempotencyKey", ""),
                               doc="Pass it to any outside system the action changes.")
    topic = property(lambda self: self.raw.get("topic", ""))
    partition = property(lambda self: self.raw.get("partition", 0))
    offset = property(lambda self: self.raw.get("offset", 0))
    timestamp = property(lambda self: self.raw.get("timestamp", 0), doc="Milliseconds since the epoch.")
    inlet = property(lambda self: self.raw.get("inlet", ""))
    run = property(lambda self: self.raw.get("run", ""))
    config = property(lambda self: self._s.config, doc="The config of hello (checked when declared).")
    vars = property(lambda self: self._s.vars, doc="The run's variables of hello.")
    workdir = property(lambda self: workdir())

    @property
    def log(self):
        if self._log is None:
            self._log = log.bind(delivery=self.delivery, item=self.id, attempt=self.attempt)
        return self._log

    def metric(self, name, value, labels=None):
        """Records a custom measurement with this attempt. value must be a finite number;
        labels map names to strings."""
        v = float(value)
        if not math.isfinite(v):
            raise ValueError("metric %r: the value must be a finite number, not %r" % (name, value))
        m = {"type": "metric", "delivery": self.delivery, "name": str(name), "value": v}
        if labels:
            m["labels"] = {str(k): str(x) for k, x in labels.items()}
        self._s.out.append(_dumps(m) + "\n")

    def __repr__(self):
        return "Item(id=%r, delivery=%r, payload=%r)" % (self.id, self.delivery, self.payload)


def _text_field(name, v):
    """The JSON member for a key or header value: name, or nameBase64 for bytes not UTF-8."""
    if isinstance(v, (bytes, bytearray)):
        try:
            v = bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            return '"%sBase64":"%s"' % (name, b64encode(v).decode("ascii"))
    return '"%s":%s' % (name, _dumps(str(v)))


def _headers_json(headers):
    if isinstance(headers, dict):
        headers = headers.items()
    parts = []
    for k, v in headers:
        h = '{"key":' + _dumps(str(k))
        if v is not None:
            h += "," + _text_field("value", v)
        parts.append(h + "}")
    return ',"headers":[' + ",".join(parts) + "]"


def _norm(name):
    return name.replace("-", "").replace("_", "").lower()


def _type_ok(t, v):
    """Whether config value v fits annotation t; the value to use."""
    origin = typing.get_origin(t)
    if origin is typing.Union:
        for a in typing.get_args(t):
            if a is type(None) and v is None:
                return True, None
            ok, x = _type_ok(a, v)
            if ok:
                return True, x
        return False, None
    if t is bool:
        return isinstance(v, bool), v
    if t is int:
        return isinstance(v, int) and not isinstance(v, bool), v
    if t is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        return ok, float(v) if ok else None
    if t is str:
        return isinstance(v, str), v
    if t in (list, dict) or origin in (list, dict):
        return isinstance(v, origin or t), v
    return True, v


def _check_config(spec, raw):
    if spec is None:
        return raw
    if dataclasses.is_dataclass(spec) and isinstance(spec, type):
        if not isinstance(raw, dict):
            raise ConfigError("the config is %s, not an object" % type(raw).__name__)
        given = {_norm(k): (k, v) for k, v in raw.items()}
        hints = typing.get_type_hints(spec)
        kwargs, problems = {}, []
        for f in dataclasses.fields(spec):
            if not f.init:
                continue
            if _norm(f.name) not in given:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    problems.append("%s: missing (declare it with --param, or give the field a default)" % f.name)
                continue
            key, v = given[_norm(f.name)]
            t = hints.get(f.name, typing.Any)
            ok, x = _type_ok(t, v)
            if not ok:
                problems.append("%s: %s is not %s" % (key, json.dumps(v), getattr(t, "__name__", t)))
            kwargs[f.name] = x
        if problems:
            raise ConfigError("the config does not fit %s: %s" % (spec.__name__, "; ".join(problems)))
        return spec(**kwargs)
    if callable(spec):
        return spec(raw)
    raise TypeError("config= takes a dataclass or a callable, not %r" % (spec,))


def _where(exc):
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    f = tb[-1]
    return " (%s:%d in %s)" % (os.path.basename(f.filename), f.lineno, f.name)


class _Session:
    """One conversation with the engine over two file descriptors."""

    def __init__(self, kind, fn, config_spec, window, size, linger, keyed):
        self.kind, self.fn, self.spec = kind, fn, config_spec
        self.window, self.size, self.linger, self.keyed = window, size, linger, keyed
        self.config, self.vars, self.config_error = None, {}, None
        self.out = []
        self.pending = []  # batch mode: items waiting for a full batch or the linger
        self.pending_since = 0.0
        self.hello = False
        self.last_flush = time.monotonic()

    # -- output

    def flush(self):
        if not self.out:
            self.last_flush = time.monotonic()
            return
        # backslashreplace turns a lone surrogate (from a \ud800 escape) into that escape again
        data = "".join(self.out).encode("utf-8", "backslashreplace")
        self.out.clear()
        fd = self.outfd
        while data:
            data = data[os.write(fd, data):]
        self.last_flush = time.monotonic()

    def answer(self, typ, d, extra=""):
        self.out.append('{"type":"%s","delivery":%s%s}\n' % (typ, _dumps(d), extra))

    def error(self, d, message, retryable):
        self.answer("error", d, ',"message":%s,"retryable":%s' % (_dumps(message), "true" if retryable else "false"))

    def fail(self, item, exc, logged=True):
        """Answers item for exc raised by user code."""
        d = item.delivery
        if isinstance(exc, Abstain):
            self.answer("abstain", d, ',"reason":' + _dumps(exc.reason))
            return
        msg = "%s: %s%s" % (type(exc).__name__, exc, _where(exc))
        if logged:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            item.log.error("the handler raised: the item fails", error=msg, traceback=tb)
        self.error(d, msg, isinstance(exc, Retryable))

    def emit(self, item, o):
        d = _dumps(item.delivery)
        if isinstance(o, Output):
            value, key, outlet, headers = o.value, o.key, o.outlet, o.headers
        else:
            value, key, outlet, headers = o, None, None, None
        payload = _dumps(value)
        if key is None:
            raw = item.raw
            if "key" in raw:
                kp = ',"key":' + _dumps(raw["key"])
            elif raw.get("keyBase64"):
                kp = ',"keyBase64":' + _dumps(raw["keyBase64"])
            else:
                kp = ""
        else:
            kp = "," + _text_field("key", key)
        tail = ""
        if outlet:
            tail += ',"outlet":' + _dumps(str(outlet))
        if headers:
            tail += _headers_json(headers)
        # this shape (type, delivery, key, payload) is the one the engine reads fastest
        return '{"type":"emit","delivery":%s%s,"payload":%s%s}\n' % (d, kp, payload, tail)

    def outputs(self, item, result, keyed):
        """The emit lines of one successful result."""
        if not keyed:
            return [self.emit(item, result)]
        if result is None:
            return []
        if isinstance(result, (Output, str, bytes, dict)) or not hasattr(result, "__iter__"):
            raise TypeError("a keyed handler returned %s, not a list of outputs" % type(result).__name__)
        return [self.emit(item, o) for o in result]

    # -- items

    def one(self, raw):
        item = Item(self, raw)
        if self.config_error is not None:
            self.error(item.delivery, self.config_error, False)
            return
        try:
            result = self.fn(item.payload, item)
            lines = self.outputs(item, result, self.kind == "map_keyed")
        except Exception as exc:  # an exception fails the item, not the process
            self.fail(item, exc, not isinstance(exc, Abstain))
            return
        self.out.extend(lines)
        self.answer("done", item.delivery)

    def run_batch(self):
        raws, self.pending = self.pending, []
        items = [Item(self, r) for r in raws]
        if self.config_error is not None:
            for it in items:
                self.error(it.delivery, self.config_error, False)
            return
        try:
            results = self.fn(items)
            results = list(results) if results is not None else []
            if len(results) != len(items):
                raise ValueError("the batch handler returned %d results for %d items: return one per item, in order" % (len(results), len(items)))
        except Exception as exc:
            if not isinstance(exc, Abstain):
                log.error("the batch handler raised: every item of the batch fails", items=len(items),
                          error="%s: %s" % (type(exc).__name__, exc),
                          traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            for it in items:
                self.fail(it, exc, False)
            return
        for it, res in zip(items, results):
            if isinstance(res, BaseException):
                self.fail(it, res, not isinstance(res, (Abstain, Retryable)))
                continue
            try:
                lines = self.outputs(it, res, self.keyed)
            except Exception as exc:
                self.fail(it, exc)
                continue
            self.out.extend(lines)
            self.answer("done", it.delivery)

    # -- messages

    def on_hello(self, msg):
        self.hello = True
        self.vars = msg.get("vars") or {}
        raw = msg.get("config")
        if raw is None:
            raw = {}
        try:
            self.config = _check_config(self.spec, raw)
        except Exception as exc:
            self.config_error = "%s (fix the config; every item fails until then)" % (exc if isinstance(exc, ConfigError) else "%s: %s" % (type(exc).__name__, exc))
            log.error("bad config", error=self.config_error)
        self.out.append('{"type":"ready","window":%d}\n' % self.window)
        self.flush()

    def on_line(self, line):
        """Handles one line; returns False on shutdown."""
        try:
            msg = _loads(line)
        except ValueError as exc:
            log.error("a line from the engine is not JSON; ignored", error=str(exc), line=line[:100].decode("utf-8", "replace"))
            return True
        if not isinstance(msg, dict):
            return True
        typ = msg.get("type")
        if typ == "item":
            if not self.hello:
                log.error("an item before hello; answering error", delivery=msg.get("delivery"))
                self.error(msg.get("delivery", ""), "an item before hello", False)
            elif self.size:
                if not self.pending:
                    self.pending_since = time.monotonic()
                self.pending.append(msg)
                if len(self.pending) >= self.size:
                    self.run_batch()
            else:
                self.one(msg)
            if time.monotonic() - self.last_flush > _FLUSH_AFTER:
                self.flush()
        elif typ == "hello":
            self.on_hello(msg)
        elif typ == "shutdown":
            if self.pending:
                self.run_batch()
            return False
        return True  # unknown types are ignored, as unknown keys are

    def serve(self, infd, outfd):
        self.outfd = outfd
        rest = []  # pieces of a line longer than one read
        while True:
            wait = self.pending_since + self.linger - time.monotonic()
            if self.pending and (wait <= 0 or not select.select([infd], [], [], wait)[0]):
                self.run_batch()  # nothing more within the linger: run what is here
                self.flush()
                continue
            chunk = os.read(infd, _READ_SIZE)
            if not chunk:
                if self.pending:
                    self.run_batch()
                self.flush()
                return 0
            if b"\n" not in chunk:
                rest.append(chunk)
                continue
            if rest:
                rest.append(chunk)
                chunk = b"".join(rest)
                rest = []
            *lines, last = chunk.split(b"\n")
            if last:
                rest.append(last)
            for line in lines:
                if line.strip() and not self.on_line(line):
                    self.flush()
                    return 0
            self.flush()


def _serve(kind, fn, config, window, size=0, linger=0.0, keyed=False):
    if not callable(fn):
        raise TypeError("millrace.%s takes a function, not %r" % (kind, fn))
    if window < 1:
        raise ValueError("window must be at least 1")
    # stdout is the protocol's: a stray print (or a library writing to fd 1) goes to stderr
    outfd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    s = _Session(kind, fn, config, max(window, size), size, linger, keyed)
    try:
        code = s.serve(0, outfd)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = 0  # the engine is gone
    if _workdir is not None:
        shutil.rmtree(_workdir, True)
    sys.stderr.flush()
    os._exit(code)  # without waiting for threads the handler may have left behind


def map(fn, *, config=None, window=WINDOW):
    """Serves fn(payload, item) -> value: one output per item, with the item's key. Never
    returns: exits 0 on shutdown."""
    _serve("map", fn, config, window)


def map_keyed(fn, *, config=None, window=WINDOW):
    """Serves fn(payload, item) -> [value | Output, ...]: zero or more outputs per item."""
    _serve("map_keyed", fn, config, window)


def batch(fn, *, size=WINDOW, linger=0.005, keyed=False, config=None, window=WINDOW):
    """Serves fn(items) -> [result, ...]: one result per item, in order. A batch holds up to
    size items, or those that arrived within linger seconds of the first. A result is one
    output (keyed=True: a list of outputs, as map_keyed) or an exception instance, which
    answers that item alone (Abstain, Retryable, or an error). If fn raises, every item of the
    batch fails with that exception."""
    if size < 1:
        raise ValueError("size must be at least 1")
    _serve("batch", fn, config, window, size=size, linger=linger, keyed=keyed)
