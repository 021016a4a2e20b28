"""millrace: write a Millstream action in Python (standard library only, one file).

An action reads items on stdin and answers on stdout, one JSON line each (docs/protocol.md).
This module speaks that protocol for you, so an action is one call. Most actions wait on
something per record (an HTTP API, a database, a model server): write the handler
``async def`` and the SDK runs up to a window of deliveries at once on one asyncio loop::

    import asyncio
    import millrace

    async def handle(payload, item):
        await asyncio.sleep(0.02)              # stands for an HTTP call, a query, a model
        item.metric("rooms", payload["rooms"])
        return {"id": payload["id"], "score": 3 * payload["rooms"]}

    millrace.map(handle)

- ``map(fn)``: ``fn(payload, item)`` returns one output, which keeps the item's key.
- ``map_keyed(fn)``: ``fn(payload, item)`` returns a list of outputs (zero, one or several),
  each a plain value (the item's key) or an ``Output(value, key=..., outlet=..., headers=...)``.
- ``batch(fn, size=64, linger=0.005)``: ``fn(items)`` gets a list of ``Item`` (what the engine
  wrote ahead: up to ``size``, or what arrived within ``linger`` seconds) and returns one result
  per item, in order: a value (one output; with ``keyed=True`` a list of outputs) or an
  exception instance, which fails that item alone.
- Concurrency: an ``async def`` handler (of any of the three) runs up to ``window`` deliveries
  (CONCURRENT_WINDOW, 128) at once, each answered as it completes; a plain handler runs one at
  a time, or on a pool of ``threads=N`` threads for a blocking library. A concurrent handler
  declares ``"concurrent"`` and ``"cancel"`` in ready: when the engine cancels a delivery (its
  timeout passed), its task is cancelled (a thread's result abandoned) and it is answered with a
  retryable error at once, its neighbours going on.
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

The SDK declares a window (64 deliveries; 128 for a concurrent handler) and batch envelopes in
ready, reads stdin in chunks and writes the answers of a run of items in one write, as one
``{"type":"batch",...}`` line, so an action streams at its defaults. Anything printed to stdout
goes to stderr instead, a JSON log line tagged with the delivery whose handler printed it (a
concurrent one's too: the item at work is a context variable, per task and per thread); so is
``log`` and, when the program configured no handler of its own, the ``logging`` module.
stdout carries protocol lines only. ``shutdown`` or the end of stdin exits with status 0 (a
concurrent handler's deliveries in flight answered first).
"""

from __future__ import annotations

import atexit
import contextvars
import json
import math
import os
import select
import sys
import time
from _thread import allocate_lock
from base64 import b64decode, b64encode
TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is imported for the type checker only: a process starts sooner
    import asyncio
    from concurrent.futures import ThreadPoolExecutor
    from typing import Any, Callable, Dict, Iterable, List, Mapping, NoReturn, Optional, Sequence, Tuple, Union

    Headers = Union[Sequence[Tuple[str, Union[str, bytes, None]]], Dict[str, Union[str, bytes, None]]]
    Handler = Callable[[Any, "Item"], Any]
    """fn(payload, item): a value (or, async def, an awaitable of one)."""
    BatchHandler = Callable[[List["Item"], ], Any]
    """fn(items): one result per item (or, async def, an awaitable of them)."""

# dataclasses, typing, tempfile, shutil, traceback, threading and asyncio are imported where they
# are used: a process that needs none of them starts sooner.

__all__ = [
    "map", "map_keyed", "batch", "Output", "Item", "Abstain", "Retryable", "ConfigError",
    "StateError", "log", "workdir", "WINDOW", "CONCURRENT_WINDOW",
]
__version__ = "0.1.0"

WINDOW = 64
"""Deliveries the SDK accepts written ahead, declared in its ready line (a handler run one at
a time)."""

CONCURRENT_WINDOW = 128
"""Deliveries a concurrent handler (async def, or threads=N) has in flight at most, declared in
its ready line: more than a sidecar batch (100 records), so one batch's calls run in one wave."""

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


def _value_encoder() -> Callable[[Any], str]:
    """A function writing a value as _dumps does, without building an encoder per call
    (JSONEncoder.encode does: that is half of its cost for a small object). It checks no
    circular references: a structure holding itself fails with RecursionError instead."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _dumps
    try:
        enc = make(None, json.JSONEncoder().default, _enc_str, None, ":", ",", False, False, False)
        fast: Callable[[Any], str] = lambda v: "".join(enc(v, 0))  # noqa: E731
        probe = {"a": [1, 2.5, None, True, "é\u2028\""], "b": {}}
        if fast(probe) != _dumps(probe):
            return _dumps
    except Exception:  # another Python's encoder: the general one
        return _dumps
    return fast


_dump_value = _value_encoder()


class Abstain(Exception):
    """Raise to answer the delivery with abstain: the engine routes the item to the fallback."""

    def __init__(self, reason: object = "") -> None:
        super().__init__(reason)
        self.reason = str(reason)


class Retryable(Exception):
    """Raise to fail this attempt with a retryable error: the engine retries with backoff."""


class ConfigError(ValueError):
    """The config of hello does not fit the declared config; every item fails with it."""


class StateError(ValueError):
    """A state the engine would refuse: the item fails with this message, even if caught."""


_MAX_STATE = 1 << 20  # the most any inlet's max-bytes may be (engine.MaxStateBytes)


def _size_text(n: int) -> str:
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

    def __init__(self, value: Any, key: Union[str, bytes, None] = None, outlet: Optional[str] = None,
                 headers: Optional[Headers] = None) -> None:
        self.value, self.key, self.outlet, self.headers = value, key, outlet, headers

    def __repr__(self) -> str:
        return "Output(%r, key=%r, outlet=%r, headers=%r)" % (self.value, self.key, self.outlet, self.headers)


_current: contextvars.ContextVar[Optional[Item]] = contextvars.ContextVar("millrace_item", default=None)
"""The item whose concurrent handler runs here: per asyncio task and per thread, so prints and
log lines of concurrent handlers are tagged with their own delivery. A handler run one at a time
is named by _printed.item instead (an attribute set costs less per record than a context var)."""


def _at_work() -> Optional[Item]:
    """The item whose handler runs here, if any."""
    return _current.get() or _printed.item


def _tags(it: Item) -> Dict[str, Any]:
    return {"delivery": it.delivery, "item": it.id, "attempt": it.attempt}


class _Log:
    """Structured logging to stderr: one JSON object per line, which the engine re-emits with
    its own fields (level and msg are read as such). A line of the unbound logger written
    inside a handler of one item carries that item's delivery, item and attempt."""

    __slots__ = ("_fields",)

    def __init__(self, fields: Optional[Dict[str, Any]] = None) -> None:
        self._fields = fields or {}

    def bind(self, **fields: Any) -> _Log:
        """A logger adding fields to every line."""
        return _Log({**self._fields, **fields})

    def _write(self, level: str, msg: object, fields: Dict[str, Any]) -> None:
        rec = {"level": level, "msg": str(msg)}
        if not self._fields and "delivery" not in fields:
            it = _at_work()
            if it is not None:
                rec.update(_tags(it))
        rec.update(self._fields)
        rec.update(fields)
        try:
            line = json.dumps(rec, ensure_ascii=False, default=str)
        except ValueError:
            line = json.dumps({"level": level, "msg": str(msg), "fields": repr(fields)})
        err = sys.stderr
        err.write(line + "\n")
        err.flush()

    def debug(self, msg: object, **fields: Any) -> None:
        self._write("DEBUG", msg, fields)

    def info(self, msg: object, **fields: Any) -> None:
        self._write("INFO", msg, fields)

    def warning(self, msg: object, **fields: Any) -> None:
        self._write("WARN", msg, fields)

    warn = warning

    def error(self, msg: object, **fields: Any) -> None:
        self._write("ERROR", msg, fields)

    def exception(self, msg: object, **fields: Any) -> None:
        """error, with the traceback of the exception being handled."""
        import traceback

        self._write("ERROR", msg, {**fields, "traceback": traceback.format_exc()})


log = _Log()
"""The action's logger (JSON lines on stderr); item.log adds the delivery, item and attempt."""


class _Printed:
    """sys.stdout while the SDK serves: each line printed becomes a JSON log line on stderr
    (msg the text, stream "stdout"), with the delivery, item and attempt of the item whose
    handler printed it, or none outside a handler of one item. With a window the engine
    cannot tell which delivery a raw stderr line belongs to; the SDK can. Under a concurrent
    handler a line written in pieces is gathered per item, so pieces of two never mix."""

    encoding, errors = "utf-8", "strict"

    def __init__(self) -> None:
        self.buf = ""
        self.item: Optional[Item] = None  # set by a sequential session while a handler of one item runs
        self.lock = allocate_lock()

    def write(self, text: str) -> int:
        text = str(text)
        it = _at_work()
        if isinstance(it, _Held):
            *lines, it._pbuf = (it._pbuf + text).split("\n")
        else:
            with self.lock:
                *lines, self.buf = (self.buf + text).split("\n")
        for line in lines:
            self.line(line, it)
        return len(text)

    @staticmethod
    def line(line: str, it: Optional[Item]) -> None:
        fields: Dict[str, Any] = {"stream": "stdout"}
        if it is not None:
            fields.update(_tags(it))
        log._write("INFO", line, fields)

    def flush(self) -> None:
        if self.buf:
            self.write("\n")

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    @property
    def buffer(self) -> Any:  # bytes written there go to stderr as they are, untagged
        return sys.stderr.buffer

    closed = False

    def fileno(self) -> int:
        return 2  # fd 1 points at stderr too

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


_printed = _Printed()


def _tag_logging() -> None:
    """When the program uses the logging module and configured no handler of its own, its
    records go to stderr as the SDK's JSON log lines, tagged with their delivery (else Python
    writes bare text for WARNING and up, which the engine cannot tie to a delivery)."""
    logging: Any = sys.modules.get("logging")
    if logging is None or logging.root.handlers:
        return
    levels = {"DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARN", "ERROR": "ERROR", "CRITICAL": "ERROR"}

    class Handler(logging.Handler):  # type: ignore[misc]  # logging, imported by the program
        def emit(self, record: Any) -> None:
            try:
                fields: Dict[str, Any] = {"logger": record.name}
                if record.exc_info:
                    fields["traceback"] = logging.Formatter().formatException(record.exc_info)
                log._write(levels.get(record.levelname, record.levelname), record.getMessage(), fields)
            except Exception:
                self.handleError(record)

    logging.root.addHandler(Handler())


_workdir: Optional[str] = None


def workdir() -> str:
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


def _bytes_or_text(text: Optional[str], b64: Optional[str]) -> Union[str, bytes, None]:
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

    def __init__(self, session: _Session, raw: Dict[str, Any]) -> None:
        self._s, self.raw = session, raw
        self._log: Optional[_Log] = None
        self._st: Optional[str] = None  # the staged state's JSON ("null" deletes)
        self._st_err: Optional[str] = None  # a state the engine would refuse: the item's error
        self.payload: Any = raw.get("payload")
        self.delivery: str = raw.get("delivery", "")

    @property
    def key(self) -> Union[str, bytes, None]:
        """str; bytes when it is not UTF-8 (keyBase64 on the wire); None when absent."""
        return _bytes_or_text(self.raw.get("key"), self.raw.get("keyBase64"))

    @property
    def headers(self) -> List[Tuple[str, Union[str, bytes, None]]]:
        return [(h.get("key", ""), _bytes_or_text(h.get("value"), h.get("valueBase64")))
                for h in self.raw.get("headers") or ()]

    @property
    def id(self) -> str:
        """The item's stable id, the same on every attempt."""
        return self.raw.get("id", "")  # type: ignore[no-any-return]

    @property
    def attempt(self) -> int:
        """The attempt number, from 1."""
        return self.raw.get("attempt", 1)  # type: ignore[no-any-return]

    @property
    def idempotency_key(self) -> str:
        """Pass it to any outside system the action changes."""
        return self.raw.get("idempotencyKey", "")  # type: ignore[no-any-return]

    @property
    def topic(self) -> str:
        return self.raw.get("topic", "")  # type: ignore[no-any-return]

    @property
    def partition(self) -> int:
        return self.raw.get("partition", 0)  # type: ignore[no-any-return]

    @property
    def offset(self) -> int:
        return self.raw.get("offset", 0)  # type: ignore[no-any-return]

    @property
    def timestamp(self) -> int:
        """Milliseconds since the epoch."""
        return self.raw.get("timestamp", 0)  # type: ignore[no-any-return]

    @property
    def inlet(self) -> str:
        return self.raw.get("inlet", "")  # type: ignore[no-any-return]

    @property
    def run(self) -> str:
        return self.raw.get("run", "")  # type: ignore[no-any-return]

    @property
    def config(self) -> Any:
        """The config of hello (checked when declared)."""
        return self._s.config

    @property
    def vars(self) -> Dict[str, Any]:
        """The run's variables of hello."""
        return self._s.vars

    @property
    def workdir(self) -> str:
        return workdir()

    @property
    def log(self) -> _Log:
        if self._log is None:
            self._log = log.bind(**_tags(self))
        return self._log

    def metric(self, name: str, value: float, labels: Optional[Mapping[str, object]] = None) -> None:
        """Records a custom measurement with this attempt. value must be a finite number;
        labels map names to strings."""
        v = float(value)
        if not math.isfinite(v):
            raise ValueError("metric %r: the value must be a finite number, not %r" % (name, value))
        m: Dict[str, Any] = {"type": "metric", "delivery": self.delivery, "name": str(name), "value": v}
        if labels:
            m["labels"] = {str(k): str(x) for k, x in labels.items()}
        self._put(_dumps(m))

    def _put(self, message: str) -> None:
        self._s.out.append(message)

    @property
    def state(self) -> Any:
        """The key's state: the JSON value the action last staged for it, None when none."""
        return self.raw.get("state")

    def set_state(self, value: Any) -> None:
        """Stages value (any JSON value) as the key's new state; None deletes it, as
        clear_state. The last call wins; it is written only if the handler returns normally.
        A state the engine would refuse raises StateError and fails the item even if caught."""
        it = self.raw
        inlet = it.get("inlet", "")
        lim = self._s.state_inlets.get(inlet)
        text = "null"
        if it.get("key") is None and not it.get("keyBase64"):
            err: Optional[str] = ("item %s has no key, so it has no state: a state message is only for keyed records "
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

    def clear_state(self) -> None:
        """Stages the deletion of the key's state: its next item has none."""
        self.set_state(None)

    def __repr__(self) -> str:
        return "Item(id=%r, delivery=%r, payload=%r)" % (self.id, self.delivery, self.payload)


class _Held(Item):
    """An item of a concurrent session, with what it keeps until its answer: its messages,
    whether it came in an envelope, a line printed in pieces, whether the engine cancelled it."""

    __slots__ = ("_out", "_env", "_pbuf", "_cancelled")

    def __init__(self, session: _Session, raw: Dict[str, Any], envelope: bool) -> None:
        super().__init__(session, raw)
        self._out: List[str] = []
        self._env, self._cancelled, self._pbuf = envelope, False, ""

    def _put(self, message: str) -> None:
        self._out.append(message)  # with its answer: a thread's metric never meets the loop's writes


def _text_field(name: str, v: Union[str, bytes, bytearray, object]) -> str:
    """The JSON member for a key or header value: name, or nameBase64 for bytes not UTF-8."""
    if isinstance(v, (bytes, bytearray)):
        raw = bytes(v)
        try:
            v = raw.decode("utf-8")
        except UnicodeDecodeError:
            return '"%sBase64":"%s"' % (name, b64encode(raw).decode("ascii"))
    return '"%s":%s' % (name, _dumps(str(v)))


def _headers_json(headers: Headers) -> str:
    pairs: Iterable[Tuple[str, Any]] = headers.items() if isinstance(headers, dict) else headers
    parts = []
    for k, v in pairs:
        h = '{"key":' + _dumps(str(k))
        if v is not None:
            h += "," + _text_field("value", v)
        parts.append(h + "}")
    return ',"headers":[' + ",".join(parts) + "]"


def _norm(name: str) -> str:
    return name.replace("-", "").replace("_", "").lower()


def _type_ok(t: Any, v: Any) -> Tuple[bool, Any]:
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


def _check_config(spec: Any, raw: Any) -> Any:
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


def _where(exc: BaseException) -> str:
    import traceback

    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    f = tb[-1]
    return " (%s:%d in %s)" % (os.path.basename(f.filename), f.lineno or 0, f.name)


def _frame(msgs: List[str], envelope: bool = True) -> bytes:
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
    parts: List[bytes] = []
    group: List[bytes] = []
    size = 0
    room = _MAX_LINE - len(_ENV_HEAD) - len(_ENV_TAIL)

    def close() -> None:
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


def _check_line(line: str) -> str:
    """Refuses an answer line over the line limit, which the engine would take for a protocol
    violation (and kill the process): the item fails instead, saying why."""
    if len(line) > _SAFE_CHARS:
        n = len(line.encode("utf-8", "backslashreplace"))
        if n > _MAX_LINE:
            raise ValueError("an output of %d bytes is over the %d-byte line limit of the protocol: "
                             "pass large data through files in workdir()" % (n, _MAX_LINE))
    return line


def _results(results: Any, items: Sequence[Item]) -> List[Any]:
    """A batch handler's results as a list, one per item, or ValueError."""
    out: List[Any] = list(results) if results is not None else []
    if len(out) != len(items):
        raise ValueError("the batch handler returned %d results for %d items: return one per item, in order" % (len(out), len(items)))
    return out


def _batch_raised(items: Sequence[Item], exc: BaseException) -> None:
    if not isinstance(exc, Abstain):
        import traceback

        log.error("the batch handler raised: every item of the batch fails", items=len(items),
                  error="%s: %s" % (type(exc).__name__, exc),
                  traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def _not_a_coroutine(exc: Exception, result: Any) -> Exception:
    """exc, or for a plain handler that returned a coroutine (which JSON cannot write), an error
    that says how to have it awaited."""
    if type(exc) is TypeError and type(result).__name__ == "coroutine":
        result.close()  # never awaited, on purpose: no warning at exit
        return TypeError("the handler returned a coroutine, not a value: declare it `async def` (the SDK then "
                         "awaits it, running deliveries at once), or return the value itself")
    return exc


class _Session:
    """One conversation with the engine over two file descriptors."""

    ready_extra = ""  # what ready declares beyond the window, batch and state

    def __init__(self, kind: str, fn: Callable[..., Any], config_spec: Any, window: int, size: int,
                 linger: float, keyed: bool) -> None:
        self.kind, self.fn, self.spec = kind, fn, config_spec
        self.window, self.size, self.linger, self.keyed = window, size, linger, keyed
        self.config: Any = None
        self.vars: Dict[str, Any] = {}
        self.config_error: Optional[str] = None
        self.out: List[str] = []  # answer messages not yet written, each without its newline
        self.out_envelope = False  # whether they answer items that came in an envelope
        self.held: List[Tuple[bool, List[str]]] = []  # (envelope, messages) written before out, in another framing
        self.pending: List[Any] = []  # batch mode: items waiting for a full batch or the linger
        self.pending_since = 0.0
        self.hello = False
        self.state_inlets: Dict[str, Any] = {}  # from hello: the inlets that keep state, with their limits
        self.last_flush = time.monotonic()
        self.outfd = 1

    # -- output

    def flush(self) -> None:
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

    def frame_as(self, envelope: bool) -> None:
        """Answers take the framing of what they answer: the answers to an envelope's items go
        in an envelope, those to an item on a line on lines, so an engine (or a tool) that
        writes no envelopes reads none back."""
        if envelope != self.out_envelope:
            if self.out:
                self.held.append((self.out_envelope, self.out[:]))
                self.out.clear()
            self.out_envelope = envelope

    def answer(self, typ: str, d: str, extra: str = "") -> None:
        self.out.append('{"type":"%s","delivery":%s%s}' % (typ, _enc_str(d), extra))

    def error(self, d: str, message: str, retryable: bool) -> None:
        self.answer("error", d, ',"message":%s,"retryable":%s' % (_dumps(message), "true" if retryable else "false"))

    def done(self, item: Item, d: str) -> None:
        """Answers item, whose handler returned normally: its staged state, then done; or the
        error of a state the engine would refuse. d is its delivery as a JSON string."""
        if item._st_err is not None:
            self.out.append('{"type":"error","delivery":%s,"message":%s,"retryable":false}' % (d, _dumps(item._st_err)))
            return
        if item._st is not None:
            self.out.append('{"type":"state","delivery":%s,"state":%s}' % (d, item._st))
        self.out.append('{"type":"done","delivery":%s}' % d)

    def fail(self, item: Item, exc: BaseException, logged: bool = True) -> None:
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

    def emit(self, item: Item, o: Any) -> str:
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

    def outputs(self, item: Item, result: Any, keyed: bool) -> List[str]:
        """The emit messages of one successful result."""
        if not keyed:
            return [self.emit(item, result)]
        if result is None:
            return []
        if isinstance(result, (Output, str, bytes, dict)) or not hasattr(result, "__iter__"):
            raise TypeError("a keyed handler returned %s, not a list of outputs" % type(result).__name__)
        return [self.emit(item, o) for o in result]

    # -- items

    def one(self, raw: Dict[str, Any]) -> None:
        item = Item(self, raw)
        if self.config_error is not None:
            self.error(item.delivery, self.config_error, False)
            return
        _printed.item = item
        result = None
        try:
            result = self.fn(item.payload, item)
            lines = self.outputs(item, result, self.kind == "map_keyed")
        except Exception as exc:  # an exception fails the item, not the process
            self.fail(item, _not_a_coroutine(exc, result), not isinstance(exc, Abstain))
            return
        finally:
            _printed.item = None
        self.out.extend(lines)
        self.done(item, _enc_str(item.delivery))

    def map_items(self, raws: Sequence[Dict[str, Any]]) -> None:
        """one() for each of raws (item messages), for map: the path every record of a plain
        map takes, so it builds each answer in one format and no list or call it can spare."""
        out, fn, enc, dump, clock, printed = self.out, self.fn, _enc_str, _dump_value, time.monotonic, _printed
        for raw in raws:
            printed.item = item = Item(self, raw)
            value = None
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
                self.fail(item, _not_a_coroutine(exc, value), not isinstance(exc, Abstain))
            else:
                if item._st is None and item._st_err is None:
                    out.append('{"type":"done","delivery":%s}' % d)
                else:
                    self.done(item, d)
            if clock() - self.last_flush > _FLUSH_AFTER:
                self.flush()
        printed.item = None

    def run_batch(self) -> None:
        raws, self.pending = self.pending, []
        items = [Item(self, r) for r in raws]
        if self.config_error is not None:
            for it in items:
                self.error(it.delivery, self.config_error, False)
            return
        try:
            results = _results(self.fn(items), items)
        except Exception as exc:
            _batch_raised(items, exc)
            for it in items:
                self.fail(it, exc, False)
            return
        for it, res in zip(items, results):
            self.answer_result(it, res)

    def answer_result(self, it: Item, res: Any) -> None:
        """Answers one item of a batch for its result: an exception instance, or outputs."""
        if isinstance(res, BaseException):
            self.fail(it, res, not isinstance(res, (Abstain, Retryable)))
            return
        try:
            lines = self.outputs(it, res, self.keyed)
        except Exception as exc:
            self.fail(it, exc)
            return
        self.out.extend(lines)
        self.done(it, _enc_str(it.delivery))

    # -- messages

    def on_hello(self, msg: Dict[str, Any]) -> None:
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
        self.out.append('{"type":"ready","window":%d,"batch":true%s%s}' % (self.window, self.ready_extra, ',"state":true' if inlets else ""))
        self.flush()

    def on_line(self, line: bytes) -> bool:
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
            self.reading(True)
            return self.on_messages(msgs, True)
        self.reading(False)
        return self.on_messages((msg,), False)

    def reading(self, envelope: bool) -> None:
        """The messages next handled came in an envelope, or not."""
        self.frame_as(envelope)

    def on_cancel(self, msg: Dict[str, Any]) -> None:
        """A sequential handler declares no cancel, so the engine sends none: ignored."""

    def on_messages(self, msgs: Sequence[Any], envelope: bool) -> bool:
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
            elif typ == "cancel":
                self.on_cancel(msg)
            elif typ == "shutdown":
                if self.pending:
                    self.run_batch()
                return False
            i += 1  # unknown types are ignored, as unknown keys are
        if envelope and self.pending:
            self.run_batch()
        return True

    def on_items(self, raws: Sequence[Dict[str, Any]]) -> None:
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

    def serve(self, infd: int, outfd: int) -> int:
        self.outfd = outfd
        rest: List[bytes] = []  # pieces of a line longer than one read
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


_CANCELLED = "cancelled: the engine cancelled this delivery (its --timeout passed); the attempt is retried"


class _Concurrent(_Session):
    """A session whose handler runs deliveries at once, up to the window: an async def
    handler's as tasks on one asyncio loop, a plain one's on a pool of threads, awaited from the
    loop. A thread reads stdin and hands each chunk to the loop, so reading never blocks it.
    Each delivery is answered as it completes, its messages (metrics, emits, state, answer)
    together, in the framing it came in; the answers of one turn of the loop go out in one
    write. A cancel from the engine cancels the delivery's task (a thread's call cannot be
    stopped: its result is dropped) and answers it with a retryable error at once."""

    ready_extra = ',"concurrent":true,"cancel":true'

    def __init__(self, kind: str, fn: Callable[..., Any], config_spec: Any, window: int, size: int,
                 linger: float, keyed: bool, threads: int) -> None:
        super().__init__(kind, fn, config_spec, window, size, linger, keyed)
        self.threads = threads
        self.pool: Optional[ThreadPoolExecutor] = None
        self.holding: Dict[str, _Held] = {}  # every item taken and not answered, by delivery
        self.tasks: Dict[str, asyncio.Task[None]] = {}  # the task of each item started
        self.units: Dict[asyncio.Task[None], List[_Held]] = {}  # the items of each task
        self.waiting: List[List[_Held]] = []  # units not started: the window is full
        self.running = 0  # items started and not answered
        self.envelope = False  # whether the messages being handled came in an envelope
        self.flushing = False  # a flush is scheduled
        self.closing = False  # shutdown or the end of stdin: answer what is held, then exit
        self.timer: Optional[asyncio.TimerHandle] = None  # the linger of a partial batch
        self.rest: List[bytes] = []  # pieces of a line longer than one read
        self.code = 0

    # -- reading

    def serve(self, infd: int, outfd: int) -> int:
        import asyncio
        import threading

        self.outfd = outfd
        self.loop = loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.set_exception_handler(lambda _, ctx: log.error("asyncio: %s" % ctx.get("message"), error=repr(ctx.get("exception"))))
        if self.threads:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="millrace-handler")
        threading.Thread(target=self.read, args=(infd,), name="millrace-stdin", daemon=True).start()
        loop.run_forever()
        return self.code

    def read(self, fd: int) -> None:
        """The reader thread: each chunk of stdin to the loop, then b"" at its end."""
        while True:
            try:
                chunk = os.read(fd, _READ_SIZE)
            except OSError:
                chunk = b""
            try:
                self.loop.call_soon_threadsafe(self.guard, self.on_chunk, chunk)
            except RuntimeError:  # the loop is closed: the process is exiting
                return
            if not chunk:
                return

    def guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except BrokenPipeError:  # the engine is gone
            self.code = 0
            self.loop.stop()

    def on_chunk(self, chunk: bytes) -> None:
        if self.closing:
            return
        if not chunk:
            self.close()
            return
        if b"\n" not in chunk:
            self.rest.append(chunk)
            return
        if self.rest:
            self.rest.append(chunk)
            chunk = b"".join(self.rest)
            self.rest = []
        *lines, last = chunk.split(b"\n")
        if last:
            self.rest.append(last)
        for line in lines:
            if line.strip() and not self.on_line(line):
                self.close()
                return
        self.soon()

    def reading(self, envelope: bool) -> None:
        self.envelope = envelope  # each answer takes its own item's framing

    def close(self) -> None:
        """No more input: run a partial batch, answer what is held, then exit 0."""
        self.closing = True
        if self.pending:
            self.run_batch()
        self.soon()

    def on_items(self, raws: Sequence[Dict[str, Any]]) -> None:
        for raw in raws:
            item = _Held(self, raw, self.envelope)
            if not self.hello or self.config_error is not None:
                if not self.hello:
                    log.error("an item before hello; answering error", delivery=item.delivery)
                self.frame_as(item._env)
                self.error(item.delivery, self.config_error or "an item before hello", False)
                continue
            self.holding[item.delivery] = item
            if not self.size:
                self.waiting.append([item])
                continue
            if not self.pending and self.linger >= 0:
                self.timer = self.loop.call_later(self.linger, self.guard, self.linger_passed)
            self.pending.append(item)
            if len(self.pending) >= self.size:
                self.run_batch()
        self.fill()

    def linger_passed(self) -> None:
        self.timer = None
        self.run_batch()
        self.fill()

    def run_batch(self) -> None:
        """Queues the pending items as one batch."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.pending:
            self.waiting.append(self.pending)
            self.pending = []
        self.fill()

    def on_cancel(self, msg: Dict[str, Any]) -> None:
        d = msg.get("delivery")
        item = self.holding.get(d) if type(d) is str else None
        if item is None:
            return  # answered already (the cancel crossed the answer) or never held: ignored
        task = self.tasks.get(item.delivery)
        item._out = []  # its metrics so far: the engine would drop them
        self.finish(item)
        item._cancelled = True
        self.error(item.delivery, _CANCELLED, True)
        if item in self.pending:
            self.pending.remove(item)
        if task is not None and all(it._cancelled for it in self.units.get(task, ())):
            task.cancel()
        self.fill()

    # -- running

    def fill(self) -> None:
        """Starts the waiting units the window has room for."""
        w = self.waiting
        while w:
            unit = [it for it in w[0] if not it._cancelled]
            if unit and self.running and self.running + len(unit) > self.window:
                break
            del w[0]
            if unit:
                self.start(unit)
        self.soon()

    def start(self, unit: List[_Held]) -> None:
        self.running += len(unit)
        coro = self.run_items(unit) if self.size else self.run_one(unit[0])
        task = self.loop.create_task(coro)
        self.units[task] = unit
        task.add_done_callback(self.units.pop)
        for it in unit:
            self.tasks[it.delivery] = task

    async def call(self, *args: Any) -> Any:
        """The handler's result for args: awaited, or from a thread of the pool."""
        if self.pool is None:
            return await self.fn(*args)
        # the thread runs in a copy of this task's context: prints there carry the item too
        return await self.loop.run_in_executor(self.pool, contextvars.copy_context().run, self.fn, *args)

    async def run_one(self, item: _Held) -> None:
        import asyncio

        _current.set(item)  # this task's own context
        try:
            result = await self.call(item.payload, item)
            lines = self.outputs(item, result, self.kind == "map_keyed")
        except asyncio.CancelledError:  # by a cancel (answered then), or by the handler itself
            if self.finish(item):
                self.error(item.delivery, _CANCELLED, True)
        except Exception as exc:  # an exception fails the item, not the process
            if self.finish(item):
                self.fail(item, exc, not isinstance(exc, Abstain))
        else:
            if self.finish(item):
                self.out.extend(lines)
                self.done(item, _enc_str(item.delivery))
        self.fill()

    async def run_items(self, items: List[_Held]) -> None:
        import asyncio

        try:
            results = _results(await self.call(items), items)
        except asyncio.CancelledError:
            for it in items:
                if self.finish(it):
                    self.error(it.delivery, _CANCELLED, True)
        except Exception as exc:
            _batch_raised(items, exc)
            for it in items:
                if self.finish(it):
                    self.fail(it, exc, False)
        else:
            for it, res in zip(items, results):
                if self.finish(it):
                    self.answer_result(it, res)
        self.fill()

    def finish(self, item: _Held) -> bool:
        """Readies the answer of item: its window slot freed, its framing taken, its messages so
        far written. False when it was cancelled: it was answered then, and is no more."""
        if item._cancelled:
            return False
        d = item.delivery
        self.holding.pop(d, None)
        if self.tasks.pop(d, None) is not None:
            self.running -= 1
        self.frame_as(item._env)
        if item._out:
            self.out.extend(item._out)
            item._out.clear()
        if item._pbuf:  # a line printed without its end
            _printed.line(item._pbuf, item)
            item._pbuf = ""
        return True

    # -- writing

    def soon(self) -> None:
        """Flushes once the loop has run what is ready: the answers of one turn, one write."""
        if not self.flushing:
            self.flushing = True
            self.loop.call_soon(self.guard, self.flush_soon)

    def flush_soon(self) -> None:
        self.flushing = False
        self.flush()
        if self.closing and not self.holding and not self.pending and not self.waiting:
            self.loop.stop()


def _is_async(fn: Any) -> bool:
    """Whether fn is an async def function (or a partial of one, a method, an object whose
    __call__ is one), without importing inspect (which costs a process's start)."""
    for _ in range(8):
        code = getattr(fn, "__code__", None)
        if code is not None:
            return bool(code.co_flags & 0x80)  # CO_COROUTINE
        if isinstance(fn, type):
            return False
        inner = getattr(fn, "func", None)  # functools.partial
        fn = inner if callable(inner) else getattr(type(fn), "__call__", None)
    return False


def _serve(kind: str, fn: Callable[..., Any], config: Any, window: Optional[int], size: int = 0,
           linger: float = 0.0, keyed: bool = False, threads: Optional[int] = None) -> NoReturn:
    if not callable(fn):
        raise TypeError("millrace.%s takes a function, not %r" % (kind, fn))
    concurrent = _is_async(fn)
    if threads is not None:
        if concurrent:
            raise ValueError("millrace.%s: threads= is for a plain handler that blocks; an async def handler "
                             "runs on the asyncio loop without threads: drop threads=" % kind)
        if type(threads) is not int or threads < 1:
            raise ValueError("millrace.%s: threads must be a whole number of at least 1, not %r" % (kind, threads))
        concurrent = True
    if window is None:
        # threads: each thread has its next item at hand, and none waits longer than a call for
        # a thread (an item's --timeout runs from when it is written)
        window = 2 * threads if threads else CONCURRENT_WINDOW if concurrent else WINDOW
    if type(window) is not int or window < 1:
        raise ValueError("window must be a whole number of at least 1, not %r" % (window,))
    # stdout is the protocol's: a stray print (or a library writing to fd 1) goes to stderr
    outfd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = _printed
    _tag_logging()
    if concurrent:
        s: _Session = _Concurrent(kind, fn, config, max(window, size), size, linger, keyed, threads or 0)
    else:
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


def map(fn: Handler, *, config: Any = None, window: Optional[int] = None, threads: Optional[int] = None) -> NoReturn:
    """Serves fn(payload, item) -> value: one output per item, with the item's key. Never
    returns: exits 0 on shutdown.

    An async def fn runs up to window deliveries at once (CONCURRENT_WINDOW), each answered as
    it completes; a plain fn one at a time (a window of WINDOW written ahead), or with
    threads=N on a pool of N threads (a window of 2N: each thread has its next item at hand)."""
    _serve("map", fn, config, window, threads=threads)


def map_keyed(fn: Handler, *, config: Any = None, window: Optional[int] = None,
              threads: Optional[int] = None) -> NoReturn:
    """Serves fn(payload, item) -> [value | Output, ...]: zero or more outputs per item. An
    async def fn, or threads=N, runs deliveries at once, as map."""
    _serve("map_keyed", fn, config, window, threads=threads)


def batch(fn: BatchHandler, *, size: int = WINDOW, linger: float = 0.005, keyed: bool = False, config: Any = None,
          window: Optional[int] = None, threads: Optional[int] = None) -> NoReturn:
    """Serves fn(items) -> [result, ...]: one result per item, in order. A batch holds up to
    size items, or those that arrived within linger seconds of the first. A result is one
    output (keyed=True: a list of outputs, as map_keyed) or an exception instance, which
    answers that item alone (Abstain, Retryable, or an error). If fn raises, every item of the
    batch fails with that exception. An async def fn, or threads=N, runs batches at once, up
    to window items in all."""
    if size < 1:
        raise ValueError("size must be at least 1")
    _serve("batch", fn, config, window, size=size, linger=linger, keyed=keyed, threads=threads)
