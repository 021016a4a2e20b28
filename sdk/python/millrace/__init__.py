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
- State per key (docs/protocol.md, "State per key"): ``item.state`` is the key's state (None
  when it has none); ``item.set_state(value)`` stages a new one, ``item.clear_state()`` (or
  ``set_state(None)``) its deletion; the last call wins. It is written only when the handler
  returns normally, before the item's answer. A state the engine would refuse (a keyless item,
  an inlet hello does not name as stateful, over its maxBytes) raises ``StateError`` and fails
  the item with the engine's words, even if caught. ``"state": true`` is declared in ready when
  hello names an inlet that keeps state.

The SDK declares a window of 64 deliveries and batch envelopes in ready, reads stdin in chunks
and writes the answers of a run of items in one write, as one ``{"type":"batch",...}`` line, so
an action streams at its defaults. Anything printed to stdout goes to stderr instead, a JSON log
line tagged with the item whose handler printed it: stdout carries protocol lines only.
``shutdown`` or the end of stdin exits with status 0.
"""

import atexit
import json
import math
import os
import select
import sys
import time
from base64 import b64decode, b64encode

# dataclasses, typing, tempfile, shutil and traceback are imported where they are used: a
# process that needs none of them starts about 20 ms sooner.

__all__ = [
    "map", "map_keyed", "batch", "Output", "Item", "Abstain", "Retryable", "ConfigError",
    "StateError", "log", "workdir", "WINDOW",
]
__version__ = "0.1.0"

WINDOW = 64
"""Deliveries the SDK accepts written ahead, declared in its ready line."""

_READ_SIZE = 1 << 16
_FLUSH_AFTER = 0.05  # seconds: answers of a slow run still go out this often
_MAX_LINE = 8 << 20  # bytes in one protocol line, newline excluded (stdio.MaxLineBytes)
_ENV_HEAD, _ENV_TAIL = '{"type":"batch","messages":[', "]}"
# A str of at most this many characters is under the line limit once encoded (a character is
# at most 6 bytes: a lone surrogate written back as its \uXXXX escape).
_SAFE_CHARS = _MAX_LINE // 6 - 1024

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_loads = json.loads
_enc_str = json.encoder.encode_basestring  # a str as a JSON string, as _dumps writes it


def _value_encoder():
    """A function writing a value as _dumps does, without building an encoder per call
    (JSONEncoder.encode does: that is half of its cost for a small object). It checks no
    circular references: a structure holding itself fails with RecursionError instead."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _dumps
    try:
        enc = make(None, json.JSONEncoder().default, _enc_str, None, ":", ",", False, False, False)
        fast = lambda v: "".join(enc(v, 0))  # noqa: E731
        probe = {"a": [1, 2.5, None, True, "é\u2028\""], "b": {}}
        if fast(probe) != _dumps(probe):
            return _dumps
    except Exception:  # another Python's encoder: the general one
        return _dumps
    return fast


_dump_value = _value_encoder()


class Abstain(Exception):
    """Raise to answer the delivery with abstain: the engine routes the item to the fallback."""

    def __init__(self, reason=""):
        super().__init__(reason)
        self.reason = str(reason)


class Retryable(Exception):
    """Raise to fail this attempt with a retryable error: the engine retries with backoff."""


class ConfigError(ValueError):
    """The config of hello does not fit the declared config; every item fails with it."""


class StateError(ValueError):
    """A state the engine would refuse: the item fails with this message, even if caught."""


_MAX_STATE = 1 << 20  # the most any inlet's max-bytes may be (engine.MaxStateBytes)


def _size_text(n):
    """A limit as the engine names it: 64 KiB, 1 MiB, or a count of bytes."""
    if n % (1 << 20) and not n % (1 << 10):
        return "%d KiB" % (n >> 10)
    if not n % (1 << 20):
        return "%d MiB" % (n >> 20)
    return "%d bytes" % n


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
        import traceback

        self._write("ERROR", msg, {**fields, "traceback": traceback.format_exc()})


log = _Log()
"""The action's logger (JSON lines on stderr); item.log adds the delivery, item and attempt."""


class _Printed:
    """sys.stdout while the SDK serves: each line printed becomes a JSON log line on stderr
    (msg the text, stream "stdout"), with the delivery, item and attempt of the item whose
    handler printed it, or none outside a handler of one item. With a window the engine
    cannot tell which delivery a raw stderr line belongs to; the SDK can."""

    encoding, errors = "utf-8", "strict"

    def __init__(self):
        self.buf = ""
        self.item = None  # set by the session while a handler of one item runs

    def write(self, text):
        text = str(text)
        *lines, self.buf = (self.buf + text).split("\n")
        for line in lines:
            fields = {"stream": "stdout"}
            it = self.item
            if it is not None:
                fields.update(delivery=it.delivery, item=it.id, attempt=it.attempt)
            log._write("INFO", line, fields)
        return len(text)

    def flush(self):
        if self.buf:
            self.write("\n")

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    @property
    def buffer(self):  # bytes written there go to stderr as they are, untagged
        return sys.stderr.buffer

    closed = False

    def fileno(self):
        return 2  # fd 1 points at stderr too

    def isatty(self):
        return False

    def writable(self):
        return True


_printed = _Printed()

_workdir = None


def workdir():
    """The process's working directory for files (MILLSTREAM_WORKDIR, removed by the engine
    after the process exits). Outside the engine, a temporary folder removed at exit."""
    global _workdir
    wd = os.environ.get("MILLSTREAM_WORKDIR")
    if wd:
        return wd
    if _workdir is None:
        import shutil
        import tempfile

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

    __slots__ = ("raw", "payload", "delivery", "_s", "_log", "_st", "_st_err")

    def __init__(self, session, raw):
        self._s, self.raw, self._log = session, raw, None
        self._st = self._st_err = None  # the staged state's JSON ("null" deletes); a refusal
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
        self._s.out.append(_dumps(m))

    @property
    def state(self):
        """The key's state: the JSON value the action last staged for it, None when none."""
        return self.raw.get("state")

    def set_state(self, value):
        """Stages value (any JSON value) as the key's new state; None deletes it, as
        clear_state. The last call wins; it is written only if the handler returns normally.
        A state the engine would refuse raises StateError and fails the item even if caught."""
        it = self.raw
        inlet = it.get("inlet", "")
        lim = self._s.state_inlets.get(inlet)
        if it.get("key") is None and not it.get("keyBase64"):
            err = ("item %s has no key, so it has no state: a state message is only for keyed records "
                   "(route keyless ones elsewhere, or stage no state for them)" % it.get("id", ""))
        elif lim is None:
            err = ("inlet %s keeps no state: add --state %s to the action line, or stage no state "
                   "for its items" % (inlet, inlet))
        else:
            err = None
            text = "null" if value is None else _dumps(value)
            n = len(text.encode("utf-8", "surrogatepass"))
            cap = lim.get("maxBytes") if type(lim) is dict else None
            if value is not None and type(cap) is int and 0 < cap < n:
                key = it.get("key") if it.get("key") is not None else it.get("keyBase64", "")
                err = ("the state staged for key %s is %s bytes, over max-bytes %s (--state %s,max-bytes=…): "
                       "keep less per key, or raise max-bytes (at most %s)"
                       % (_dumps(key), format(n, ","), _size_text(cap), inlet, _size_text(_MAX_STATE)))
        if err is not None:
            self._st_err = err
            raise StateError(err)
        self._st = text

    def clear_state(self):
        """Stages the deletion of the key's state: its next item has none."""
        self.set_state(None)

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
    import typing

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
    import dataclasses
    import typing

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
    import traceback

    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    f = tb[-1]
    return " (%s:%d in %s)" % (os.path.basename(f.filename), f.lineno, f.name)


def _frame(msgs, envelope=True):
    """The bytes that carry msgs (answer messages, each without its newline): one line when
    there is one (or when not envelope: a line each), else one batch envelope; several, when
    one envelope would pass the line limit (an answer that fits a line alone but not an
    envelope with others goes on its own)."""
    if not envelope:
        return ("\n".join(msgs) + "\n").encode("utf-8", "backslashreplace")
    if len(msgs) == 1:
        text = msgs[0] + "\n"
    else:
        text = _ENV_HEAD + ",".join(msgs) + _ENV_TAIL + "\n"
    # backslashreplace turns a lone surrogate (from a \ud800 escape) into that escape again
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= _MAX_LINE + 1 or len(msgs) == 1:
        return data
    parts, group, size = [], [], 0
    room = _MAX_LINE - len(_ENV_HEAD) - len(_ENV_TAIL)

    def close():
        if len(group) == 1:
            parts.append(group[0] + b"\n")
        else:
            parts.append(b"%s%s%s\n" % (_ENV_HEAD.encode(), b",".join(group), _ENV_TAIL.encode()))

    for m in msgs:
        b = m.encode("utf-8", "backslashreplace")
        if group and size + len(group) + len(b) > room:  # len(group): the commas
            close()
            group, size = [], 0
        group.append(b)
        size += len(b)
    close()
    return b"".join(parts)


def _check_line(line):
    """Refuses an answer line over the line limit, which the engine would take for a protocol
    violation (and kill the process): the item fails instead, saying why."""
    if len(line) > _SAFE_CHARS:
        n = len(line.encode("utf-8", "backslashreplace"))
        if n > _MAX_LINE:
            raise ValueError("an output of %d bytes is over the %d-byte line limit of the protocol: "
                             "pass large data through files in workdir()" % (n, _MAX_LINE))
    return line


class _Session:
    """One conversation with the engine over two file descriptors."""

    def __init__(self, kind, fn, config_spec, window, size, linger, keyed):
        self.kind, self.fn, self.spec = kind, fn, config_spec
        self.window, self.size, self.linger, self.keyed = window, size, linger, keyed
        self.config, self.vars, self.config_error = None, {}, None
        self.out = []  # answer messages not yet written, each without its newline
        self.out_envelope = False  # whether they answer items that came in an envelope
        self.held = []  # (envelope, messages) written before out, in another framing
        self.pending = []  # batch mode: items waiting for a full batch or the linger
        self.pending_since = 0.0
        self.hello = False
        self.state_inlets = {}  # from hello: the inlets that keep state, with their limits
        self.last_flush = time.monotonic()

    # -- output

    def flush(self):
        out = self.out
        if out or self.held:
            data = _frame(out, self.out_envelope) if out else b""
            if self.held:
                data = b"".join([_frame(m, e) for e, m in self.held] + [data])
                self.held = []
            out.clear()
            fd = self.outfd
            while data:
                data = data[os.write(fd, data):]
        self.last_flush = time.monotonic()

    def frame_as(self, envelope):
        """Answers take the framing of what they answer: the answers to an envelope's items go
        in an envelope, those to an item on a line on lines, so an engine (or a tool) that
        writes no envelopes reads none back."""
        if envelope != self.out_envelope:
            if self.out:
                self.held.append((self.out_envelope, self.out[:]))
                self.out.clear()
            self.out_envelope = envelope

    def answer(self, typ, d, extra=""):
        self.out.append('{"type":"%s","delivery":%s%s}' % (typ, _enc_str(d), extra))

    def error(self, d, message, retryable):
        self.answer("error", d, ',"message":%s,"retryable":%s' % (_dumps(message), "true" if retryable else "false"))

    def done(self, item, d):
        """Answers item, whose handler returned normally: its staged state, then done; or the
        error of a state the engine would refuse. d is its delivery as a JSON string."""
        if item._st_err is not None:
            self.out.append('{"type":"error","delivery":%s,"message":%s,"retryable":false}' % (d, _dumps(item._st_err)))
            return
        if item._st is not None:
            self.out.append('{"type":"state","delivery":%s,"state":%s}' % (d, item._st))
        self.out.append('{"type":"done","delivery":%s}' % d)

    def fail(self, item, exc, logged=True):
        """Answers item for exc raised by user code."""
        d = item.delivery
        if isinstance(exc, StateError) and item._st_err is not None:
            self.error(d, item._st_err, False)  # the engine's words, as it would answer
            return
        if isinstance(exc, Abstain):
            self.answer("abstain", d, ',"reason":' + _dumps(exc.reason))
            return
        msg = "%s: %s%s" % (type(exc).__name__, exc, _where(exc))
        if logged:
            import traceback

            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            item.log.error("the handler raised: the item fails", error=msg, traceback=tb)
        self.error(d, msg, isinstance(exc, Retryable))

    def emit(self, item, o):
        d = _enc_str(item.delivery)
        if isinstance(o, Output):
            value, key, outlet, headers = o.value, o.key, o.outlet, o.headers
        else:
            value, key, outlet, headers = o, None, None, None
        payload = _dump_value(value)
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
        return _check_line('{"type":"emit","delivery":%s%s,"payload":%s%s}' % (d, kp, payload, tail))

    def outputs(self, item, result, keyed):
        """The emit messages of one successful result."""
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
        _printed.item = item
        try:
            result = self.fn(item.payload, item)
            lines = self.outputs(item, result, self.kind == "map_keyed")
        except Exception as exc:  # an exception fails the item, not the process
            self.fail(item, exc, not isinstance(exc, Abstain))
            return
        finally:
            _printed.item = None
        self.out.extend(lines)
        self.done(item, _enc_str(item.delivery))

    def map_items(self, raws):
        """one() for each of raws (item messages), for map: the path every record of a plain
        map takes, so it builds each answer in one format and no list or call it can spare."""
        out, fn, enc, dump, clock, printed = self.out, self.fn, _enc_str, _dump_value, time.monotonic, _printed
        for raw in raws:
            printed.item = item = Item(self, raw)
            try:
                d = enc(item.delivery)
                value = fn(item.payload, item)
                key = raw.get("key")
                if key is None and "keyBase64" in raw:
                    out.append(self.emit(item, value))
                else:
                    payload = dump(value)
                    if len(payload) > _SAFE_CHARS:
                        _check_line(payload)
                    if key is None:
                        out.append('{"type":"emit","delivery":%s,"payload":%s}' % (d, payload))
                    else:
                        out.append('{"type":"emit","delivery":%s,"key":%s,"payload":%s}' % (d, enc(key), payload))
            except Exception as exc:  # an exception fails the item, not the process
                self.fail(item, exc, not isinstance(exc, Abstain))
            else:
                if item._st is None and item._st_err is None:
                    out.append('{"type":"done","delivery":%s}' % d)
                else:
                    self.done(item, d)
            if clock() - self.last_flush > _FLUSH_AFTER:
                self.flush()
        printed.item = None

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
                import traceback

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
            self.done(it, _enc_str(it.delivery))

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
        inlets = msg.get("state")
        if inlets is not None and type(inlets) is not dict:
            log.error('hello\'s "state" is not an object of inlets ({"PORT":{"maxBytes":N}}); no inlet keeps state', state=repr(inlets)[:100])
            inlets = None
        self.state_inlets = inlets or {}
        self.flush()
        self.frame_as(False)  # ready is a line of its own, never in an envelope
        # state is declared only when the action line keeps state, as the Go SDK does
        self.out.append('{"type":"ready","window":%d,"batch":true%s}' % (self.window, ',"state":true' if inlets else ""))
        self.flush()

    def on_line(self, line):
        """Handles one line (an item, an envelope of them, or another message); returns False
        on shutdown."""
        try:
            msg = _loads(line.decode("utf-8"))  # a str decodes faster than bytes
        except ValueError as exc:
            log.error("a line from the engine is not JSON; ignored", error=str(exc), line=line[:100].decode("utf-8", "replace"))
            return True
        if type(msg) is not dict:
            return True
        typ = msg.get("type")
        if typ == "batch":
            msgs = msg.get("messages")
            if type(msgs) is not list:
                log.error("a batch envelope from the engine without a messages array; ignored", line=line[:100].decode("utf-8", "replace"))
                return True
            self.frame_as(True)
            return self.on_messages(msgs, True)
        self.frame_as(False)
        return self.on_messages((msg,), False)

    def on_messages(self, msgs, envelope):
        """Handles the messages of one line in order; returns False on shutdown. The items of
        an envelope are what the engine had room to write at once: a batch handler gets them
        without waiting for the linger."""
        i, n = 0, len(msgs)
        while i < n:
            msg = msgs[i]
            typ = msg.get("type") if type(msg) is dict else None
            if typ == "item":
                j = i + 1
                while j < n and type(msgs[j]) is dict and msgs[j].get("type") == "item":
                    j += 1
                self.on_items(msgs[i:j] if envelope else msgs)
                i = j
                continue
            if typ == "hello":
                self.on_hello(msg)
            elif typ == "shutdown":
                if self.pending:
                    self.run_batch()
                return False
            i += 1  # unknown types are ignored, as unknown keys are
        if envelope and self.pending:
            self.run_batch()
        return True

    def on_items(self, raws):
        if not self.hello:
            for raw in raws:
                log.error("an item before hello; answering error", delivery=raw.get("delivery"))
                self.error(raw.get("delivery", ""), "an item before hello", False)
        elif self.size:
            pending = self.pending
            for raw in raws:
                if not pending:
                    self.pending_since = time.monotonic()
                pending.append(raw)
                if len(pending) >= self.size:
                    self.run_batch()
                    pending = self.pending
                    if time.monotonic() - self.last_flush > _FLUSH_AFTER:
                        self.flush()
        elif self.kind == "map" and self.config_error is None:
            self.map_items(raws)
        else:
            for raw in raws:
                self.one(raw)
                if time.monotonic() - self.last_flush > _FLUSH_AFTER:
                    self.flush()

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
            if not self.out:
                self.last_flush = time.monotonic()  # the 50 ms count from the first answer's work
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
    sys.stdout = _printed
    s = _Session(kind, fn, config, max(window, size), size, linger, keyed)
    try:
        code = s.serve(0, outfd)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = 0  # the engine is gone
    if _workdir is not None:
        import shutil

        shutil.rmtree(_workdir, True)
    _printed.flush()
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
