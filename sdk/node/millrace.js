'use strict';
/**
 * millrace: write a Millstream action in Node.js (standard library only, one file, CommonJS).
 *
 * An action reads items on stdin and answers on stdout, one JSON line each (docs/protocol.md).
 * This module speaks that protocol for you, so an action is one call. Most actions wait on a
 * call per record (an HTTP API, a database, a model): an async handler runs up to a window of
 * deliveries (128) at once, each answered as it settles:
 *
 *   const millrace = require('millrace');
 *   millrace.map(async (payload, item) => {
 *     if (!payload.surface) throw new millrace.Abstain('no surface area');
 *     const res = await fetch(URL, { method: 'POST', body: JSON.stringify(payload), signal: item.signal });
 *     if (!res.ok) throw new millrace.Retryable(`scoring answered ${res.status}`);
 *     return { id: payload.id, score: (await res.json()).score };
 *   });
 *
 * - map(fn): fn(payload, item) returns (or resolves to) one output, which keeps the item's key.
 * - mapKeyed(fn): fn(payload, item) returns an array of outputs: plain values (the item's key)
 *   or millrace.output(value, { key, outlet, headers }).
 * - batch(fn, { size: 64, linger: 5 }): fn(items) gets an array of Item (what the engine wrote
 *   ahead: up to size, or what arrived within linger ms) and returns one result per item, in
 *   order: a value (one output; with keyed: true an array of outputs) or an Error, which fails
 *   that item alone.
 * - throw new Abstain(reason): hand the item to the step's fallback. throw new Retryable(msg):
 *   fail the attempt, to be retried with backoff. Any other exception (or rejected promise)
 *   fails the item for good, its stack logged to stderr; the process keeps serving.
 * - item.metric(name, value, labels), item.log / millrace.log (JSON lines on stderr),
 *   item.config (the config of hello, checked against options.config: a schema such as
 *   { minRooms: 'integer', greeting: { type: 'string', default: 'hi' } }, or a function that
 *   validates the raw object), millrace.workdir() (MILLSTREAM_WORKDIR).
 * - State per key (docs/protocol.md, "State per key"): item.state is the key's state
 *   (undefined when it has none); item.setState(value) stages a new one, item.clearState() (or
 *   setState(null)) its deletion; the last call wins. It is written only when the handler
 *   returns (or resolves) normally, before the item's answer. A state the engine would refuse
 *   (a keyless item, an inlet hello does not name as stateful, over its maxBytes) throws
 *   StateError and fails the item with the engine's words, even if caught. "state": true is
 *   declared in ready when hello names an inlet that keeps state.
 *
 * - Concurrency: a handler declared async (an AsyncFunction) runs concurrently: up to
 *   opts.window deliveries (CONCURRENT_WINDOW, 128) at once, each answered as it settles, and
 *   ready declares "concurrent" and "cancel". When the engine cancels a delivery (its --timeout
 *   passed), item.signal (an AbortSignal) is aborted and the item answered with a retryable
 *   error at once; what its handler does later is dropped. The SDK must say so in ready,
 *   before the first item, so it goes by the handler's form: a plain function returning a
 *   promise runs concurrently with { concurrent: true }, an async one one at a time with
 *   { concurrent: false }. Any other handler runs one item at a time, in order, as before.
 *
 * The SDK declares a window (64 deliveries; 128 concurrent) and batch envelopes in ready, reads
 * stdin in chunks and writes the answers of a run of items in one write, as one
 * {"type":"batch",...} line. console.log and anything else written to process.stdout go to
 * stderr, as JSON log lines tagged with the item whose handler wrote them (a concurrent one's
 * too: the item is kept per async context by an AsyncLocalStorage), as are millrace.log's lines
 * written inside a handler: stdout carries protocol lines only. shutdown or the end of stdin
 * exits with status 0 (a concurrent handler's items in flight answered first).
 */

const fs = require('fs');
const os = require('os');
const path = require('path');

const WINDOW = 64; // deliveries written ahead to a handler run one at a time
// Deliveries a concurrent handler has in flight at most: more than a sidecar batch (100
// records), so the calls of one batch run in one wave rather than two.
const CONCURRENT_WINDOW = 128;
const CANCELLED = 'cancelled: the engine cancelled this delivery (its --timeout passed); the attempt is retried';
const FLUSH_AFTER_MS = 50; // answers of a slow run still go out this often
const MAX_LINE = 8 << 20; // bytes in one protocol line, newline excluded (stdio.MaxLineBytes)
const ENV_HEAD = '{"type":"batch","messages":[';
const ENV_TAIL = ']}';
// A string of at most this many UTF-16 units is under the line limit once encoded (a unit is
// at most 3 bytes of UTF-8).
const SAFE_UNITS = Math.floor(MAX_LINE / 3) - 1024;
const ENVELOPE_START = { type: '' }; // queued before an envelope's messages
const ENVELOPE_END = { type: '' }; // and after them

class Abstain extends Error {
  constructor(reason = '') {
    super(String(reason));
    this.name = 'Abstain';
    this.reason = String(reason);
  }
}

class Retryable extends Error {
  constructor(message) {
    super(message);
    this.name = 'Retryable';
  }
}

class ConfigError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** One output of mapKeyed or a keyed batch. */
/** A state the engine would refuse: the item fails with this message, even if caught. */
class StateError extends Error {
  constructor(message) {
    super(message);
    this.name = 'StateError';
  }
}

const MAX_STATE = 1 << 20; // the most any inlet's max-bytes may be (engine.MaxStateBytes)

/** A limit as the engine names it: 64 KiB, 1 MiB, or a count of bytes. */
function sizeText(n) {
  if (n % (1 << 20) && !(n % (1 << 10))) return `${n >> 10} KiB`;
  if (!(n % (1 << 20))) return `${n / (1 << 20)} MiB`;
  return `${n} bytes`;
}

class Output {
  constructor(value, { key, outlet, headers } = {}) {
    this.value = value;
    this.key = key; // undefined keeps the item's key; a string or Buffer sets it
    this.outlet = outlet;
    this.headers = headers; // [[key, value]] or { key: value }; value string, Buffer or null
  }
}

function output(value, opts) {
  return new Output(value, opts);
}

/** Structured logging to stderr: one JSON object per line (level and msg read by the engine). */
class Log {
  constructor(fields) {
    this.fields = fields || {};
  }
  bind(fields) {
    return new Log({ ...this.fields, ...fields });
  }
  write(level, msg, fields) {
    let tags;
    if (this.fields.delivery === undefined && !(fields && fields.delivery !== undefined)) {
      const it = currentItem(); // a line of the unbound logger inside a handler: its delivery
      if (it) tags = itemTags(it);
    }
    let line;
    try {
      line = JSON.stringify({ level, msg: String(msg), ...tags, ...this.fields, ...fields });
    } catch (e) {
      line = JSON.stringify({ level, msg: String(msg), fields: String(e) });
    }
    fs.writeSync(2, line + '\n');
  }
  debug(msg, fields) { this.write('DEBUG', msg, fields); }
  info(msg, fields) { this.write('INFO', msg, fields); }
  warn(msg, fields) { this.write('WARN', msg, fields); }
  error(msg, fields) { this.write('ERROR', msg, fields); }
}

const log = new Log();

const itemTags = (it) => ({ delivery: it.delivery, item: it.id, attempt: it.attempt });
// The item whose handler runs here: the session's current one, or (concurrent handlers) the
// one of this async context, kept by an AsyncLocalStorage.
let currentItem = () => null;

let tmpWorkdir = null;

/** MILLSTREAM_WORKDIR (removed by the engine after the process exits); outside the engine, a
 * temporary folder removed at exit. */
function workdir() {
  const wd = process.env.MILLSTREAM_WORKDIR;
  if (wd) return wd;
  if (!tmpWorkdir) {
    tmpWorkdir = fs.mkdtempSync(path.join(os.tmpdir(), 'millrace-workdir-'));
    process.on('exit', () => fs.rmSync(tmpWorkdir, { recursive: true, force: true }));
  }
  return tmpWorkdir;
}

function bytesOrText(text, b64) {
  if (text !== undefined && text !== null) return text;
  if (b64) return Buffer.from(b64, 'base64');
  return null;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The JSON member for a key or header value: name, or nameBase64 for bytes not UTF-8. */
function textField(name, v) {
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) {
    try {
      v = utf8.decode(v);
    } catch (e) {
      return `"${name}Base64":"${Buffer.from(v).toString('base64')}"`;
    }
  }
  return `"${name}":${JSON.stringify(String(v))}`;
}

function headersJSON(headers) {
  const pairs = Array.isArray(headers) ? headers : Object.entries(headers);
  const parts = pairs.map(([k, v]) => {
    let h = '{"key":' + JSON.stringify(String(k));
    if (v !== null && v !== undefined) h += ',' + textField('value', v);
    return h + '}';
  });
  return ',"headers":[' + parts.join(',') + ']';
}

/** One delivery. raw is the item line as decoded, unknown keys included. */
class Item {
  constructor(session, raw) {
    this._s = session;
    this.raw = raw;
    this.payload = raw.payload === undefined ? null : raw.payload;
    this.delivery = raw.delivery || '';
    this._log = null;
    this._st = undefined; // the staged state's JSON ('null' deletes)
    this._stErr = null; // a state the engine would refuse: the item's error
    this._ac = null; // the AbortController behind signal, made when first asked for
    // a concurrent session's: the item's messages until its answer, whether it came in an
    // envelope, a line written in pieces, whether the engine cancelled it
    this._out = null;
    this._env = false;
    this._pbuf = '';
    this._cancelled = false;
  }
  /** Aborted when the engine cancels the delivery (its --timeout passed): pass it to fetch and
   * other calls that take one, so they stop. Never aborted for a handler run one at a time. */
  get signal() {
    if (!this._ac) this._ac = new AbortController();
    return this._ac.signal;
  }
  /** string, Buffer when it is not UTF-8, null when absent */
  get key() { return bytesOrText(this.raw.key, this.raw.keyBase64); }
  /** [[key, value]], value string, Buffer or null */
  get headers() {
    return (this.raw.headers || []).map((h) => [h.key || '', bytesOrText(h.value, h.valueBase64)]);
  }
  get id() { return this.raw.id || ''; }
  get attempt() { return this.raw.attempt || 1; }
  get idempotencyKey() { return this.raw.idempotencyKey || ''; }
  get topic() { return this.raw.topic || ''; }
  get partition() { return this.raw.partition || 0; }
  get offset() { return this.raw.offset || 0; }
  get timestamp() { return this.raw.timestamp || 0; }
  get inlet() { return this.raw.inlet || ''; }
  get run() { return this.raw.run || ''; }
  get config() { return this._s.config; }
  get vars() { return this._s.vars; }
  get workdir() { return workdir(); }
  get log() {
    if (!this._log) this._log = log.bind(itemTags(this));
    return this._log;
  }
  /** The key's state: the JSON value the action last staged for it, undefined when none. */
  get state() { return this.raw.state === null ? undefined : this.raw.state; }
  /** Stages value (any JSON value) as the key's new state; null deletes it, as clearState.
   * The last call wins; it is written only if the handler returns normally. A state the
   * engine would refuse throws StateError and fails the item even if caught. */
  setState(value) {
    const it = this.raw;
    const inlet = it.inlet || '';
    const inlets = this._s.stateInlets;
    const lim = Object.prototype.hasOwnProperty.call(inlets, inlet) ? inlets[inlet] : undefined;
    const keyed = (it.key !== undefined && it.key !== null) || !!it.keyBase64;
    let err = null, text = 'null';
    if (!keyed) {
      err = `item ${it.id || ''} has no key, so it has no state: a state message is only for keyed records (route keyless ones elsewhere, or stage no state for them)`;
    } else if (lim === undefined) {
      err = `inlet ${inlet} keeps no state: add --state ${inlet} to the action line, or stage no state for its items`;
    } else if (value !== null) {
      text = JSON.stringify(value);
      if (text === undefined) throw new TypeError(`a state of type ${typeof value} cannot be written as JSON`);
      const n = Buffer.byteLength(text, 'utf8');
      const cap = lim && lim.maxBytes;
      if (Number.isInteger(cap) && cap > 0 && n > cap) {
        const key = it.key !== undefined && it.key !== null ? it.key : it.keyBase64;
        err = `the state staged for key ${JSON.stringify(key)} is ${String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',')} bytes, over max-bytes ${sizeText(cap)} (--state ${inlet},max-bytes=…): keep less per key, or raise max-bytes (at most ${sizeText(MAX_STATE)})`;
      }
    }
    if (err !== null) {
      this._stErr = err;
      throw new StateError(err);
    }
    this._st = text;
  }
  /** Stages the deletion of the key's state: its next item has none. */
  clearState() { this.setState(null); }
  /** Records a custom measurement with this attempt: a finite number, labels of strings. */
  metric(name, value, labels) {
    const v = Number(value);
    if (!Number.isFinite(v)) throw new TypeError(`metric ${JSON.stringify(name)}: the value must be a finite number, not ${value}`);
    const m = { type: 'metric', delivery: this.delivery, name: String(name), value: v };
    if (labels && Object.keys(labels).length) {
      m.labels = {};
      for (const [k, x] of Object.entries(labels)) m.labels[k] = String(x);
    }
    (this._out || this._s.out).push(JSON.stringify(m));
  }
}

const norm = (s) => s.replace(/[-_]/g, '').toLowerCase();

const TYPES = {
  string: (v) => typeof v === 'string',
  integer: (v) => Number.isInteger(v),
  'memory-size': (v) => Number.isInteger(v),
  number: (v) => typeof v === 'number' && Number.isFinite(v),
  double: (v) => typeof v === 'number' && Number.isFinite(v),
  boolean: (v) => typeof v === 'boolean',
  duration: (v) => typeof v === 'string',
  object: (v) => v !== null && typeof v === 'object' && !Array.isArray(v),
  array: (v) => Array.isArray(v),
  any: () => true,
};

/** Checks the raw config of hello against spec: a schema object or a function. */
function checkConfig(spec, raw) {
  if (spec === undefined || spec === null) return raw;
  if (typeof spec === 'function') return spec(raw);
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new ConfigError(`the config is ${JSON.stringify(raw)}, not an object`);
  const given = new Map(Object.entries(raw).map(([k, v]) => [norm(k), [k, v]]));
  const out = {};
  const problems = [];
  for (const [field, entry] of Object.entries(spec)) {
    const { type, default: def } = typeof entry === 'string' ? { type: entry } : entry;
    const test = TYPES[type];
    if (!test) throw new TypeError(`config field ${field}: unknown type ${JSON.stringify(type)} (want one of ${Object.keys(TYPES).join(', ')})`);
    const g = given.get(norm(field));
    if (!g) {
      if (def === undefined) problems.push(`${field}: missing (declare it with --param, or give it a default)`);
      else out[field] = def;
      continue;
    }
    const [key, v] = g;
    if (!test(v)) problems.push(`${key}: ${JSON.stringify(v)} is not ${type === 'integer' ? 'an' : 'a'} ${type}`);
    out[field] = v;
  }
  if (problems.length) throw new ConfigError('the config does not fit: ' + problems.join('; '));
  return out;
}

function where(err) {
  const line = String((err && err.stack) || '').split('\n').find((l) => /^\s+at /.test(l));
  return line ? ` (${line.trim().replace(/^at /, '')})` : '';
}

const isAsyncFunction = (fn) => Object.prototype.toString.call(fn) === '[object AsyncFunction]';

const isThenable = (v) => v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function';

/**
 * The text that carries msgs (answer messages, each without its newline): one line when there
 * is one (or when not envelope: a line each), else one batch envelope; several, when one
 * envelope would pass the line limit (an answer that fits a line alone but not an envelope
 * with others goes on its own).
 */
function frame(msgs, envelope = true) {
  if (!envelope) return msgs.join('\n') + '\n';
  if (msgs.length === 1) return msgs[0] + '\n';
  const text = ENV_HEAD + msgs.join(',') + ENV_TAIL + '\n';
  if (text.length <= SAFE_UNITS || Buffer.byteLength(text) <= MAX_LINE + 1) return text;
  const parts = [];
  const room = MAX_LINE - ENV_HEAD.length - ENV_TAIL.length;
  let group = [];
  let size = 0;
  const close = () => parts.push(group.length === 1 ? group[0] + '\n' : ENV_HEAD + group.join(',') + ENV_TAIL + '\n');
  for (const m of msgs) {
    const n = Buffer.byteLength(m);
    if (group.length && size + group.length + n > room) { // group.length: the commas
      close();
      group = [];
      size = 0;
    }
    group.push(m);
    size += n;
  }
  close();
  return parts.join('');
}

/** Refuses an answer line over the line limit, which the engine would take for a protocol
 * violation (and kill the process): the item fails instead, saying why. */
function checkLine(line) {
  if (line.length > SAFE_UNITS) {
    const n = Buffer.byteLength(line);
    if (n > MAX_LINE) throw new RangeError(`an output of ${n} bytes is over the ${MAX_LINE}-byte line limit of the protocol: pass large data through files in workdir()`);
  }
  return line;
}

/** One conversation with the engine. */
class Session {
  constructor(kind, fn, opts, write) {
    this.kind = kind;
    this.fn = fn;
    this.spec = opts.config;
    this.size = opts.size || 0;
    this.linger = opts.linger === undefined ? 5 : opts.linger;
    this.keyed = kind === 'mapKeyed' || !!opts.keyed;
    this.concurrent = opts.concurrent === undefined ? isAsyncFunction(fn) : !!opts.concurrent;
    this.window = Math.max(opts.window || (this.concurrent ? CONCURRENT_WINDOW : WINDOW), this.size);
    this.write = write;
    this.config = null;
    this.vars = {};
    this.configError = null;
    this.out = []; // answer messages not yet written, each without its newline
    this.outEnvelope = false; // whether they answer items that came in an envelope
    this.held = []; // [envelope, messages] to write before out, in another framing
    this.lastFlush = Date.now();
    this.current = null; // the item whose handler runs, for console.log's lines
    this.als = null; // a concurrent session's AsyncLocalStorage: the item of each async context
    this.printed = null; // writes a line printed by a handler, tagged
    this.queue = []; // decoded messages not yet handled
    this.qhead = 0;
    this.pending = []; // batch mode: items waiting for a full batch or the linger
    this.timer = null;
    this.busy = false; // awaiting a handler's promise
    this.hello = false;
    this.stateInlets = {}; // from hello: the inlets that keep state, with their limits
    this.rest = []; // pieces of a line longer than one chunk
    this.ended = false;
    this.eofSeen = false;
    // a concurrent session's
    this.taken = 0; // items taken from the queue and not answered (pending or running)
    this.holding = new Map(); // delivery -> each of those items
    this.queued = new Map(); // delivery -> whether it came in an envelope, of items not taken
    this.dropped = new Set(); // deliveries cancelled before they were taken
    this.inEnvelope = false; // whether the messages being pumped came in an envelope
    this.full = false; // the pump waits for a slot in the window
    this.pumping = false;
    this.flushing = false; // a flush is scheduled
    this.ending = false; // shutdown or the end of stdin: exit once every item is answered
  }

  flush(done) {
    this.lastFlush = Date.now();
    if (!this.out.length && !this.held.length) {
      if (done) done();
      return;
    }
    let data = this.out.length ? frame(this.out, this.outEnvelope) : '';
    if (this.held.length) {
      data = this.held.map(([e, m]) => frame(m, e)).join('') + data;
      this.held = [];
    }
    this.out = [];
    this.write(data, done);
  }

  /** Answers take the framing of what they answer: the answers to an envelope's items go in
   * an envelope, those to an item on a line on lines, so an engine (or a tool) that writes no
   * envelopes reads none back. */
  frameAs(envelope) {
    if (envelope === this.outEnvelope) return;
    if (this.out.length) {
      this.held.push([this.outEnvelope, this.out]);
      this.out = [];
    }
    this.outEnvelope = envelope;
  }

  answer(typ, d, extra = '') {
    this.out.push(`{"type":"${typ}","delivery":${JSON.stringify(d)}${extra}}`);
  }

  error(d, message, retryable) {
    this.answer('error', d, `,"message":${JSON.stringify(message)},"retryable":${retryable ? 'true' : 'false'}`);
  }

  fail(item, err, logIt = true) {
    if (err instanceof StateError && item._stErr !== null) {
      this.error(item.delivery, item._stErr, false); // the engine's words, as it would answer
      return;
    }
    if (err instanceof Abstain) {
      this.answer('abstain', item.delivery, ',"reason":' + JSON.stringify(err.reason));
      return;
    }
    const name = (err && err.name) || 'Error';
    const msg = `${name}: ${err && err.message !== undefined ? err.message : String(err)}${where(err)}`;
    if (logIt) item.log.error('the handler threw: the item fails', { error: msg, stack: String((err && err.stack) || err) });
    this.error(item.delivery, msg, err instanceof Retryable);
  }

  emit(item, o) {
    let value = o, key, outlet, headers;
    if (o instanceof Output) ({ value, key, outlet, headers } = o);
    if (value === undefined) value = null;
    const payload = JSON.stringify(value);
    if (payload === undefined) throw new TypeError(`an output of type ${typeof value} cannot be written as JSON`);
    let kp = '';
    if (key === undefined || key === null) {
      if (item.raw.key !== undefined && item.raw.key !== null) kp = ',"key":' + JSON.stringify(item.raw.key);
      else if (item.raw.keyBase64) kp = ',"keyBase64":' + JSON.stringify(item.raw.keyBase64);
    } else {
      kp = ',' + textField('key', key);
    }
    let tail = '';
    if (outlet) tail += ',"outlet":' + JSON.stringify(String(outlet));
    if (headers) tail += headersJSON(headers);
    // this shape (type, delivery, key, payload) is the one the engine reads fastest
    return checkLine(`{"type":"emit","delivery":${JSON.stringify(item.delivery)}${kp},"payload":${payload}${tail}}`);
  }

  outputs(item, result, keyed) {
    if (!keyed) return [this.emit(item, result)];
    if (result === null || result === undefined) return [];
    if (!Array.isArray(result)) throw new TypeError(`a keyed handler returned ${result instanceof Output ? 'an Output' : typeof result}, not an array of outputs`);
    return result.map((o) => this.emit(item, o));
  }

  succeed(item, result, keyed) {
    const d = JSON.stringify(item.delivery);
    try {
      if (keyed) {
        const lines = this.outputs(item, result, keyed);
        for (const l of lines) this.out.push(l);
      } else if (result instanceof Output || item.raw.keyBase64 !== undefined) {
        this.out.push(this.emit(item, result));
      } else {
        // a plain map's path, taken by every record: the answers in one format each
        const payload = JSON.stringify(result === undefined ? null : result);
        if (payload === undefined) throw new TypeError(`an output of type ${typeof result} cannot be written as JSON`);
        const key = item.raw.key;
        this.out.push(checkLine(key === undefined || key === null
          ? `{"type":"emit","delivery":${d},"payload":${payload}}`
          : `{"type":"emit","delivery":${d},"key":${JSON.stringify(key)},"payload":${payload}}`));
      }
    } catch (err) {
      this.fail(item, err);
      return;
    }
    if (item._stErr !== null) {
      this.error(item.delivery, item._stErr, false);
      return;
    }
    if (item._st !== undefined) this.out.push(`{"type":"state","delivery":${d},"state":${item._st}}`);
    this.out.push(`{"type":"done","delivery":${d}}`);
  }

  /** Handles one item; returns a promise when the handler went async. */
  one(raw) {
    const item = new Item(this, raw);
    if (this.configError !== null) {
      this.error(item.delivery, this.configError, false);
      return null;
    }
    let result;
    this.current = item;
    try {
      result = this.fn(item.payload, item);
    } catch (err) {
      this.current = null;
      this.fail(item, err, !(err instanceof Abstain));
      return null;
    }
    if (isThenable(result)) {
      // items are answered one after another: the current one stays so until it settles
      return Promise.resolve(result).then((r) => { this.current = null; this.succeed(item, r, this.keyed); }, (err) => { this.current = null; this.fail(item, err, !(err instanceof Abstain)); });
    }
    this.current = null;
    this.succeed(item, result, this.keyed);
    return null;
  }

  runBatch() {
    if (this.concurrent) return this.startBatch();
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const items = this.pending.map((r) => new Item(this, r));
    this.pending = [];
    if (this.configError !== null) {
      for (const it of items) this.error(it.delivery, this.configError, false);
      return null;
    }
    const failAll = (err) => {
      if (!(err instanceof Abstain)) log.error('the batch handler threw: every item of the batch fails', { items: items.length, error: String(err), stack: String((err && err.stack) || err) });
      for (const it of items) this.fail(it, err, false);
    };
    const finish = (results) => {
      if (!Array.isArray(results) || results.length !== items.length) {
        failAll(new TypeError(`the batch handler returned ${Array.isArray(results) ? results.length + ' results' : typeof results} for ${items.length} items: return an array with one result per item, in order`));
        return;
      }
      items.forEach((it, i) => {
        const r = results[i];
        if (r instanceof Error) this.fail(it, r, !(r instanceof Abstain || r instanceof Retryable));
        else this.succeed(it, r, this.keyed);
      });
    };
    let results;
    try {
      results = this.fn(items);
    } catch (err) {
      failAll(err);
      return null;
    }
    if (isThenable(results)) return Promise.resolve(results).then(finish, failAll);
    finish(results);
    return null;
  }

  onHello(msg) {
    this.hello = true;
    this.vars = msg.vars || {};
    const raw = msg.config === undefined || msg.config === null ? {} : msg.config;
    try {
      this.config = checkConfig(this.spec, raw);
    } catch (err) {
      const text = err instanceof ConfigError ? err.message : `${err.name || 'Error'}: ${err.message}`;
      this.configError = `${text} (fix the config; every item fails until then)`;
      log.error('bad config', { error: this.configError });
    }
    let inlets = msg.state;
    if (inlets !== undefined && inlets !== null && (typeof inlets !== 'object' || Array.isArray(inlets))) {
      log.error('hello\'s "state" is not an object of inlets ({"PORT":{"maxBytes":N}}); no inlet keeps state', { state: JSON.stringify(inlets).slice(0, 100) });
      inlets = null;
    }
    this.stateInlets = inlets || {};
    const stateful = Object.keys(this.stateInlets).length > 0; // declared only when the line keeps state, as the Go SDK
    this.flush();
    this.frameAs(false); // ready is a line of its own, never in an envelope
    const extra = this.concurrent ? ',"concurrent":true,"cancel":true' : '';
    this.out.push(`{"type":"ready","window":${this.window},"batch":true${extra}${stateful ? ',"state":true' : ''}}`);
    this.flush();
  }

  feed(chunk) {
    let start = 0;
    let nl = chunk.indexOf(10);
    if (nl < 0) {
      this.rest.push(chunk);
      return;
    }
    if (this.rest.length) {
      this.rest.push(chunk.subarray(0, nl));
      this.decode(Buffer.concat(this.rest));
      this.rest = [];
      start = nl + 1;
      nl = chunk.indexOf(10, start);
    }
    while (nl >= 0) {
      if (nl > start) this.decode(chunk.subarray(start, nl));
      start = nl + 1;
      nl = chunk.indexOf(10, start);
    }
    if (start < chunk.length) this.rest.push(chunk.subarray(start));
  }

  decode(line) {
    const text = line.toString('utf8');
    if (!text.trim()) return;
    let msg;
    try {
      msg = JSON.parse(text);
    } catch (err) {
      log.error('a line from the engine is not JSON; ignored', { error: err.message, line: text.slice(0, 100) });
      return;
    }
    if (msg === null || typeof msg !== 'object') return;
    if (msg.type !== 'batch') {
      this.enqueue(msg, false);
      return;
    }
    const msgs = msg.messages;
    if (!Array.isArray(msgs)) {
      log.error('a batch envelope from the engine without a messages array; ignored', { line: text.slice(0, 100) });
      return;
    }
    this.queue.push(ENVELOPE_START);
    for (let i = 0; i < msgs.length; i++) {
      const m = msgs[i];
      if (m !== null && typeof m === 'object') this.enqueue(m, true);
    }
    this.queue.push(ENVELOPE_END);
  }

  enqueue(msg, envelope) {
    if (this.concurrent) {
      // a cancel is handled as it is read: the window may be full of the calls it cancels
      if (msg.type === 'cancel') {
        this.onCancel(msg);
        return;
      }
      if (msg.type === 'item' && typeof msg.delivery === 'string') this.queued.set(msg.delivery, envelope);
    }
    this.queue.push(msg);
  }

  /** Runs the pending batch before the message just taken, which is taken again once it is answered. */
  runBefore() {
    this.qhead--;
    return this.runBatch();
  }

  /** Holds the pump while a handler's answer is awaited: what is written goes out now. */
  hold(wait) {
    this.busy = true;
    this.flush();
    wait.then(() => {
      this.busy = false;
      this.pump();
    });
  }

  /** Handles queued messages until the queue is empty or a handler goes async. */
  pump() {
    this.pumping = true;
    try {
      this.pumpQueue();
    } finally {
      this.pumping = false;
    }
  }

  pumpQueue() {
    while (!this.busy && !this.ended && !this.ending && this.qhead < this.queue.length) {
      const msg = this.queue[this.qhead++];
      let wait = null;
      switch (msg.type) {
        case 'item':
          if (!this.hello) {
            log.error('an item before hello; answering error', { delivery: msg.delivery });
            if (this.concurrent) this.frameAs(this.inEnvelope);
            this.error(msg.delivery || '', 'an item before hello', false);
          } else if (this.concurrent) {
            if (this.taken >= this.window) { // the window is full: on when an answer frees a slot
              this.qhead--;
              this.full = true;
              return;
            }
            this.take(msg);
          } else if (this.size) {
            this.pending.push(msg);
            if (this.pending.length >= this.size) wait = this.runBatch();
          } else {
            wait = this.one(msg);
          }
          break;
        case 'hello':
          this.onHello(msg);
          break;
        case '':
          if (msg === ENVELOPE_START) {
            if (this.concurrent) this.inEnvelope = true; // each answer takes its item's framing
            else this.frameAs(true);
          } else if (msg === ENVELOPE_END) {
            // the items of an envelope are what the engine had room to write at once: a batch
            // handler gets them without waiting for the linger, answered in the envelope
            if (this.pending.length) wait = this.runBefore();
            else if (this.concurrent) this.inEnvelope = false;
            else this.frameAs(false);
          }
          break;
        case 'shutdown':
          if (this.pending.length) {
            wait = this.runBefore();
            break;
          }
          this.end();
          return;
        default: // unknown types are ignored, as unknown keys are
      }
      if (wait) {
        this.hold(wait);
        return;
      }
      if (Date.now() - this.lastFlush > FLUSH_AFTER_MS) this.flush();
    }
    if (this.qhead === this.queue.length) {
      this.queue = [];
      this.qhead = 0;
    }
    if (this.eofSeen && !this.busy && !this.ended && !this.ending) {
      // nothing more will come: run what is pending now, then end
      if (this.pending.length) {
        const wait = this.runBatch();
        if (wait) {
          this.hold(wait);
          return;
        }
      }
      this.end();
      return;
    }
    if (!this.busy && !this.ended && this.pending.length && !this.timer && this.linger >= 0) {
      this.timer = setTimeout(() => {
        this.timer = null;
        if (this.busy || this.ended || !this.pending.length) return;
        const wait = this.runBatch();
        if (wait) this.hold(wait);
        else this.flush();
      }, this.linger);
    }
    this.flush();
  }

  // -- a concurrent handler: up to the window of items at once, each answered as it settles

  /** Starts one item (or adds it to the pending batch). */
  take(raw) {
    const d = raw.delivery;
    this.queued.delete(d);
    if (this.dropped.delete(d)) return; // cancelled before it was taken: answered then
    const item = new Item(this, raw);
    item._out = [];
    item._env = this.inEnvelope;
    if (this.configError !== null) {
      this.frameAs(item._env);
      this.error(item.delivery, this.configError, false);
      this.soon();
      return;
    }
    this.taken++;
    this.holding.set(item.delivery, item);
    if (this.size) {
      this.pending.push(item);
      if (this.pending.length >= this.size) this.startBatch();
      return;
    }
    let result;
    try {
      result = this.als.run(item, this.fn, item.payload, item);
    } catch (err) {
      this.settle(item, false, err);
      return;
    }
    if (isThenable(result)) {
      Promise.resolve(result).then((r) => this.als.run(null, () => this.settle(item, true, r)),
        (err) => this.als.run(null, () => this.settle(item, false, err)));
    } else {
      this.settle(item, true, result);
    }
  }

  /** Starts the pending items as one batch. */
  startBatch() {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const items = this.pending;
    this.pending = [];
    if (!items.length) return null;
    const settle = (ok, v) => {
      if (ok && (!Array.isArray(v) || v.length !== items.length)) {
        ok = false;
        v = new TypeError(`the batch handler returned ${Array.isArray(v) ? v.length + ' results' : typeof v} for ${items.length} items: return an array with one result per item, in order`);
      }
      if (!ok) {
        if (!(v instanceof Abstain)) log.error('the batch handler threw: every item of the batch fails', { items: items.length, error: String(v), stack: String((v && v.stack) || v) });
        for (const it of items) if (this.finish(it)) this.fail(it, v, false);
      } else {
        items.forEach((it, i) => {
          if (!this.finish(it)) return;
          const r = v[i];
          if (r instanceof Error) this.fail(it, r, !(r instanceof Abstain || r instanceof Retryable));
          else this.succeed(it, r, this.keyed);
        });
      }
      this.resume();
    };
    let results;
    try {
      results = this.als.run(null, this.fn, items);
    } catch (err) {
      settle(false, err);
      return null;
    }
    if (isThenable(results)) {
      Promise.resolve(results).then((r) => this.als.run(null, settle, true, r), (err) => this.als.run(null, settle, false, err));
    } else {
      settle(true, results);
    }
    return null;
  }

  settle(item, ok, v) {
    if (this.finish(item)) {
      if (ok) this.succeed(item, v, this.keyed);
      else this.fail(item, v, !(v instanceof Abstain));
    }
    this.resume();
  }

  /** Readies the answer of item: its window slot freed, its framing taken, its messages so far
   * written. False when it was cancelled: it was answered then, and is no more. */
  finish(item) {
    if (item._cancelled) return false;
    this.holding.delete(item.delivery);
    this.taken--;
    this.frameAs(item._env);
    for (const m of item._out) this.out.push(m);
    item._out = [];
    if (item._pbuf) { // a line written without its end
      this.printed(item._pbuf, item);
      item._pbuf = '';
    }
    this.soon();
    return true;
  }

  /** Takes more items once an answer freed a slot. */
  resume() {
    if (this.full && !this.pumping) {
      this.full = false;
      this.pump();
    }
  }

  /** A cancel from the engine: the item's signal aborted and its answer (a retryable error)
   * written at once; whatever its handler does later is dropped. */
  onCancel(msg) {
    const d = msg.delivery;
    if (typeof d !== 'string') return;
    const item = this.holding.get(d);
    if (item) {
      item._out = []; // its metrics so far: the engine would drop them
      this.finish(item);
      item._cancelled = true;
      const i = this.pending.indexOf(item);
      if (i >= 0) this.pending.splice(i, 1);
      this.error(d, CANCELLED, true);
      this.full = false; // the pump that follows the read takes the next item
      if (item._ac) item._ac.abort();
    } else if (this.queued.has(d)) { // read, not yet taken: never run
      this.frameAs(this.queued.get(d));
      this.queued.delete(d);
      this.dropped.add(d);
      this.error(d, CANCELLED, true);
      this.soon();
    } // else answered already (the cancel crossed the answer) or never held: ignored
  }

  /** Flushes once the answers settled in this turn are in: one write for them. */
  soon() {
    if (this.flushing) return;
    this.flushing = true;
    setImmediate(() => {
      this.flushing = false;
      if (this.ending && this.taken === 0) this.end();
      else this.flush();
    });
  }

  end() {
    if (this.ended) return;
    if (this.taken > 0) { // a concurrent handler's items in flight: the last answer ends it
      this.ending = true;
      this.soon();
      return;
    }
    this.ended = true;
    this.flush(() => process.exit(0));
  }

  /** The end of stdin: answer what is queued and pending, then exit 0. */
  eof() {
    this.eofSeen = true;
    this.pump();
  }
}

function serve(kind, fn, opts = {}) {
  if (typeof fn !== 'function') throw new TypeError(`millrace.${kind} takes a function, not ${typeof fn}`);
  if (opts.window !== undefined && !(Number.isInteger(opts.window) && opts.window >= 1)) throw new RangeError(`millrace.${kind}: window must be a whole number of at least 1, not ${opts.window}`);
  if (opts.concurrent !== undefined && typeof opts.concurrent !== 'boolean') throw new TypeError(`millrace.${kind}: concurrent must be true or false, not ${JSON.stringify(opts.concurrent)}`);
  // stdout is the protocol's: console.log and other writes to process.stdout become JSON log
  // lines on stderr, tagged with the item whose handler wrote them (with a window the engine
  // cannot tell which delivery a raw stderr line belongs to; the SDK can)
  const stdout = process.stdout;
  const protoWrite = stdout.write.bind(stdout);
  const s = new Session(kind, fn, opts, (data, done) => {
    protoWrite(data, done);
  });
  if (s.concurrent) {
    const { AsyncLocalStorage } = require('async_hooks');
    s.als = new AsyncLocalStorage(); // the item of each handler's async context
  }
  currentItem = () => (s.als && s.als.getStore()) || s.current;
  let printed = ''; // a line written in pieces
  const logPrinted = (line, it) => {
    log.write('INFO', line, it ? { stream: 'stdout', ...itemTags(it) } : { stream: 'stdout' });
  };
  s.printed = logPrinted;
  stdout.write = (chunk, encoding, cb) => {
    if (typeof encoding === 'function') cb = encoding;
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    const it = currentItem();
    let lines;
    if (it && it._out !== null) { // a concurrent handler's: gathered on its item, so pieces never mix
      lines = (it._pbuf + text).split('\n');
      it._pbuf = lines.pop();
    } else {
      lines = (printed + text).split('\n');
      printed = lines.pop();
    }
    for (const line of lines) logPrinted(line, it);
    if (typeof cb === 'function') process.nextTick(cb);
    return true;
  };
  process.on('exit', () => {
    if (printed) logPrinted(printed, null);
  });
  stdout.on('error', (err) => {
    if (err.code === 'EPIPE') process.exit(0); // the engine is gone
    throw err;
  });
  process.stdin.on('data', (chunk) => {
    if (!s.out.length) s.lastFlush = Date.now(); // the 50 ms count from the first answer's work
    s.feed(chunk);
    s.pump();
  });
  process.stdin.on('end', () => s.eof());
  return s;
}

/** Serves fn(payload, item) -> value: one output per item, with the item's key. An async fn
 * (or opts.concurrent) runs up to opts.window items at once. */
function map(fn, opts) {
  serve('map', fn, opts);
}

/** Serves fn(payload, item) -> [value | Output, ...]: zero or more outputs per item. */
function mapKeyed(fn, opts) {
  serve('mapKeyed', fn, opts);
}

/** Serves fn(items) -> [result, ...], one result per item: up to opts.size items (64) or those
 * that arrived within opts.linger ms (5) of the first. A result is one output (keyed: an array
 * of outputs) or an Error, which answers that item alone. If fn throws, every item fails. */
function batch(fn, opts = {}) {
  const size = opts.size === undefined ? WINDOW : opts.size;
  if (!(size >= 1)) throw new RangeError('batch size must be at least 1');
  serve('batch', fn, { ...opts, size });
}

module.exports = { map, mapKeyed, batch, output, Output, Item, Abstain, Retryable, ConfigError, StateError, log, workdir, WINDOW, CONCURRENT_WINDOW, checkConfig };
// for the SDK's own tests and measurements, not an API
module.exports._Session = Session;
module.exports._frame = frame;
