'use strict';
// Tests of the Node.js SDK over real pipes: each test starts testdata/action.js as a child and
// speaks the action protocol to it. Run: node --test (in sdk/node).
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ACTION = path.join(__dirname, '..', 'testdata', 'action.js');
const WAIT = 10000; // ms for any one line: a bound on a hang, not a speed target
const MAX_LINE = 8 << 20; // stdio.MaxLineBytes

class Child {
  constructor(args, env = {}) {
    const base = { ...process.env };
    delete base.MILLSTREAM_WORKDIR;
    this.p = spawn(process.execPath, [ACTION, ...args], { env: { ...base, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    this.lines = [];
    this.waiters = [];
    this.ended = false;
    this.stderr = '';
    let rest = '';
    this.p.stdout.setEncoding('utf8');
    this.p.stdout.on('data', (s) => {
      const parts = (rest + s).split('\n');
      rest = parts.pop();
      for (const l of parts) this.lines.push(l);
      this.wake();
    });
    this.p.stdout.on('end', () => { this.ended = true; this.wake(); });
    this.p.stderr.setEncoding('utf8');
    this.p.stderr.on('data', (s) => { this.stderr += s; });
    this.exited = new Promise((resolve) => this.p.on('close', (code) => resolve(code)));
    this.seq = 0;
    this.msgs = []; // messages of the last line read not yet returned
    this.frames = []; // per line read: 'line', or ['batch', its message count]
  }
  wake() { for (const w of this.waiters.splice(0)) w(); }
  async rawLine() {
    const deadline = Date.now() + WAIT;
    while (!this.lines.length) {
      if (this.ended) throw new Error('stdout ended; stderr: ' + this.stderr);
      if (Date.now() > deadline) throw new Error('no line within ' + WAIT + 'ms; stderr: ' + this.stderr);
      await new Promise((r) => { this.waiters.push(r); setTimeout(r, 100); });
    }
    const line = this.lines.shift();
    if (Buffer.byteLength(line) > MAX_LINE) throw new Error(`a line of ${Buffer.byteLength(line)} bytes, over the line limit`);
    return line;
  }
  /** The next message, from a line of its own or from a batch envelope. */
  async read() {
    while (!this.msgs.length) {
      const m = JSON.parse(await this.rawLine());
      if (m.type === 'batch') {
        this.frames.push(['batch', m.messages.length]);
        this.msgs = m.messages;
      } else {
        this.frames.push('line');
        this.msgs = [m];
      }
    }
    return this.msgs.shift();
  }
  send(...msgs) { this.p.stdin.write(msgs.map((m) => JSON.stringify(m) + '\n').join('')); }
  /** Writes msgs as one batch envelope, as the engine does for a run of items. */
  sendBatch(...msgs) { this.send({ type: 'batch', messages: msgs }); }
  async hello(config = {}, extra = {}) {
    this.send({ type: 'hello', protocol: 1, action: 't', config, vars: { v: 1 }, ...extra });
    return this.read();
  }
  item(payload, fields = {}) {
    this.seq++;
    return { type: 'item', delivery: `dl-${this.seq}`, id: `t/0/${this.seq}`, key: 'k', payload, partition: 0, offset: this.seq, timestamp: 0, attempt: 1, idempotencyKey: `ik${this.seq}`, ...fields };
  }
  async answer() {
    const got = [];
    for (;;) {
      const m = await this.read();
      if (['done', 'error', 'abstain'].includes(m.type)) return [got, m];
      got.push(m);
    }
  }
  /** The messages of n deliveries answered in any order: each exactly once, its messages
   * before its answer. Returns [Map delivery -> [messages, answer], the order answered]. */
  async answers(n) {
    const got = new Map();
    const order = [];
    const msgs = new Map();
    while (order.length < n) {
      const m = await this.read();
      const d = m.delivery;
      if (got.has(d)) throw new Error(`a message for ${d} after its answer: ${JSON.stringify(m)}`);
      if (['done', 'error', 'abstain'].includes(m.type)) {
        got.set(d, [msgs.get(d) || [], m]);
        msgs.delete(d);
        order.push(d);
      } else {
        if (!msgs.has(d)) msgs.set(d, []);
        msgs.get(d).push(m);
      }
    }
    return [got, order];
  }
  async ask(payload, fields) {
    const it = this.item(payload, fields);
    this.send(it);
    const [got, ans] = await this.answer();
    assert.equal(ans.delivery, it.delivery);
    for (const m of got) assert.equal(m.delivery, it.delivery);
    return [got, ans];
  }
  async shutdown() {
    this.send({ type: 'shutdown' });
    const code = await this.exited;
    return [code, this.lines.filter((l) => l !== '')];
  }
  kill() { if (this.p.exitCode === null) this.p.kill('SIGKILL'); }
}

function child(t, ...args) {
  const c = new Child(args);
  t.after(() => c.kill());
  return c;
}

test('ready declares the window; shutdown exits 0', async (t) => {
  const c = child(t, 'map');
  assert.deepEqual(await c.hello(), { type: 'ready', window: 64, batch: true });
  assert.deepEqual(c.frames, ['line']); // ready: never in an envelope
  assert.deepEqual(await c.shutdown(), [0, []]);
});

test('the end of stdin exits 0', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  c.p.stdin.end();
  assert.equal(await c.exited, 0);
});

test('answers take the framing of their items, in the fast shapes; the key kept', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  c.send(c.item({ a: 1, t: 'é' }, { key: 'k1' }));
  assert.equal(await c.rawLine(), '{"type":"emit","delivery":"dl-1","key":"k1","payload":{"a":1,"t":"é"}}');
  assert.equal(await c.rawLine(), '{"type":"done","delivery":"dl-1"}');
  c.sendBatch(c.item({ a: 2 }, { key: 'k2' }));
  assert.equal(await c.rawLine(), '{"type":"batch","messages":[{"type":"emit","delivery":"dl-2","key":"k2","payload":{"a":2}},{"type":"done","delivery":"dl-2"}]}');
  const [got] = await c.ask({ a: 2 }, { key: undefined });
  assert.equal('key' in got[0], false);
});

test('keyBase64 and header base64 are decoded and kept', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const [got, ans] = await c.ask({ do: 'key' }, { key: undefined, keyBase64: '/wA=', headers: [{ key: 'b', valueBase64: '/g==' }, { key: 't', value: 'v' }, { key: 'n' }] });
  assert.equal(ans.type, 'done');
  assert.equal(got[0].keyBase64, '/wA=');
  assert.equal('key' in got[0], false);
  assert.deepEqual(got[0].payload, { key: 'ff00', headers: [['b', 'fe'], ['t', 'v'], ['n', null]], id: 't/0/1', attempt: 1, idempotencyKey: 'ik1' });
});

test('mapKeyed: keys, outlets, headers', async (t) => {
  const c = child(t, 'keyed');
  await c.hello();
  let [got, ans] = await c.ask({ x: 1 }, { key: 'item-key' });
  assert.deepEqual(ans, { type: 'done', delivery: 'dl-1' });
  assert.equal(got.length, 3);
  assert.equal(got[0].key, 'a');
  assert.equal(got[1].keyBase64, '/wA=');
  assert.equal(got[1].outlet, 'other');
  assert.deepEqual(got[1].headers, [{ key: 'h', valueBase64: '/g==' }, { key: 't', value: 'v' }, { key: 'n' }]);
  assert.equal(got[2].key, 'item-key');
  [got, ans] = await c.ask({ do: 'none' });
  assert.deepEqual([got, ans.type], [[], 'done']);
});

test('abstain, retryable, and exceptions fail the item, not the process', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  let [got, ans] = await c.ask({ do: 'abstain' });
  assert.deepEqual(ans, { type: 'abstain', delivery: 'dl-1', reason: 'unsure' });
  [, ans] = await c.ask({ do: 'retry' });
  assert.deepEqual([ans.type, ans.retryable], ['error', true]);
  assert.match(ans.message, /try again/);
  [, ans] = await c.ask({ do: 'raise' });
  assert.deepEqual([ans.type, ans.retryable], ['error', false]);
  assert.match(ans.message, /RangeError: boom \(.*action\.js/);
  [, ans] = await c.ask({ do: 'reject' });
  assert.deepEqual([ans.type, ans.retryable], ['error', false]);
  assert.match(ans.message, /async boom/);
  [got, ans] = await c.ask({ do: 'bigint' });
  assert.deepEqual([got, ans.type], [[], 'error']);
  [got, ans] = await c.ask({ do: 'async', n: 7 });
  assert.deepEqual([ans.type, got[0].payload], ['done', { late: 7 }]);
  [got, ans] = await c.ask({ still: 'alive' });
  assert.deepEqual([ans.type, got[0].payload], ['done', { still: 'alive' }]);
  assert.equal((await c.shutdown())[0], 0);
  assert.match(c.stderr, /at .*handle.*action\.js/);
  for (const l of c.stderr.trim().split('\n')) JSON.parse(l);
});

test('metric with labels, before the answer', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const [got] = await c.ask({ do: 'metric' });
  assert.deepEqual(got[0], { type: 'metric', delivery: 'dl-1', name: 'm', value: 2.5, labels: { l: 'v' } });
  assert.equal(got[1].type, 'emit');
});

test('logs and a stray console.log go to stderr', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  await c.ask({ do: 'log' });
  const [got] = await c.ask({ do: 'print' });
  assert.deepEqual(got.map((m) => m.type), ['emit']);
  assert.deepEqual(await c.shutdown(), [0, []]);
  const recs = c.stderr.trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(recs, [
    { level: 'INFO', msg: 'hello log', n: 1, delivery: 'dl-1', item: 't/0/1', attempt: 1 },
    { level: 'INFO', msg: 'stray print', stream: 'stdout', delivery: 'dl-2', item: 't/0/2', attempt: 1 },
  ]);
});

test('a console.log is tagged with the item that printed it, async or not', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const items = [c.item({ n: 1 }), c.item({ do: 'print' }), c.item({ do: 'print-async' }, { attempt: 3 })];
  c.sendBatch(...items);
  for (const _ of items) await c.answer();
  assert.equal((await c.shutdown())[0], 0);
  const recs = c.stderr.trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(recs.map((r) => [r.msg, r.delivery, r.item, r.attempt]), [['stray print', 'dl-2', 't/0/2', 1], ['late print', 'dl-3', 't/0/3', 3]]);
});

test('an envelope is answered in one envelope, in order', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const items = Array.from({ length: 64 }, (_, i) => c.item({ i, t: 'é\u2028' }, i % 3 === 0 ? { key: undefined } : { key: `k${i}` }));
  items[6].payload = { do: 'abstain' };
  c.sendBatch(...items);
  for (const [n, it] of items.entries()) {
    const [got, ans] = await c.answer();
    assert.equal(ans.delivery, it.delivery);
    if (n === 6) assert.deepEqual([ans.type, got], ['abstain', []]);
    else assert.deepEqual([ans.type, got[0].payload, got[0].key], ['done', it.payload, it.key]);
  }
  assert.deepEqual(c.frames, ['line', ['batch', 127]]); // ready, then one write
});

test('envelopes and lines mixed with other messages, each answered in its framing', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const [a, b, d, e] = [c.item({ n: 1 }), c.item({ n: 2 }), c.item({ n: 3 }), c.item({ n: 4 })];
  // one write
  c.send({ type: 'batch', messages: [] }, a, { type: 'batch', messages: [b, { type: 'future-thing' }, d] }, e);
  c.sendBatch({ type: 'shutdown' });
  for (const it of [a, b, d, e]) {
    const [got, ans] = await c.answer();
    assert.deepEqual([ans.type, ans.delivery, got[0].payload], ['done', it.delivery, it.payload]);
  }
  assert.equal(await c.exited, 0);
  assert.deepEqual(c.frames, ['line', 'line', 'line', ['batch', 4], 'line', 'line']);
});

test('a window of lines is answered on lines', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const items = Array.from({ length: 8 }, (_, i) => c.item({ i }));
  c.send(...items);
  for (const it of items) {
    const [, ans] = await c.answer();
    assert.deepEqual([ans.type, ans.delivery], ['done', it.delivery]);
  }
  assert.deepEqual(c.frames.slice(1), Array(16).fill('line'));
});

test('answers over the line limit are split across lines', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const big = Array.from({ length: 3 }, (_, i) => c.item({ big: 'x'.repeat(3 << 20), i }));
  c.sendBatch(...big);
  for (const it of big) {
    const [got, ans] = await c.answer();
    assert.deepEqual([ans.type, ans.delivery, got[0].payload.i], ['done', it.delivery, it.payload.i]);
  }
  // rawLine checked each line against the limit; the 50 ms flush may cut earlier too
  const out = c.frames.slice(1);
  assert.ok(out.length >= 2, JSON.stringify(out));
  assert.equal(out.reduce((n, f) => n + (f === 'line' ? 1 : f[1]), 0), 6);
});

test('frame packs envelopes up to the line limit', () => {
  const { _frame: frame } = require('../millrace.js');
  const m = (n) => JSON.stringify('x'.repeat(n - 2)); // a JSON string of n bytes
  const head = '{"type":"batch","messages":['.length;
  const tail = ']}'.length;
  const cases = [
    [[10], ['line']],
    [[10, 20], [['batch', 2]]],
    [[3 << 20, 3 << 20, 3 << 20], [['batch', 2], 'line']],
    [[MAX_LINE - head - tail - 3, 2], [['batch', 2]]], // exactly the limit
    [[MAX_LINE - head - tail - 3, 3], ['line', 'line']],
    [[5, MAX_LINE - 5, 7, 8], ['line', 'line', ['batch', 2]]],
    [[MAX_LINE], ['line']],
  ];
  for (const [sizes, want] of cases) {
    const lines = frame(sizes.map(m)).split('\n');
    assert.equal(lines.pop(), '');
    const got = [];
    const seen = [];
    for (const l of lines) {
      assert.ok(Buffer.byteLength(l) <= MAX_LINE, String(sizes));
      const v = JSON.parse(l);
      if (typeof v === 'object') {
        got.push(['batch', v.messages.length]);
        for (const x of v.messages) seen.push(x.length + 2);
      } else {
        got.push('line');
        seen.push(v.length + 2);
      }
    }
    assert.deepEqual([got, seen], [want, sizes], String(sizes));
  }
});

test('an answer near the line limit goes on a line of its own', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const frameLen = '{"type":"emit","delivery":"dl-2","key":"k","payload":{"s":""}}'.length;
  c.sendBatch(c.item({ n: 1 }), c.item({ s: 'y'.repeat(MAX_LINE - 10 - frameLen) }), c.item({ n: 3 }));
  const msgs = [];
  let near = null;
  while (msgs.length < 6) { // the 50 ms flush may cut the rest anywhere: look at that line only
    const line = await c.rawLine();
    const v = JSON.parse(line);
    if (v.type === 'batch') {
      for (const m of v.messages) msgs.push([m.type, m.delivery]);
      continue;
    }
    msgs.push([v.type, v.delivery]);
    if (v.type === 'emit' && v.delivery === 'dl-2') near = line;
  }
  assert.deepEqual(msgs, [1, 2, 3].flatMap((n) => [['emit', `dl-${n}`], ['done', `dl-${n}`]]));
  assert.equal(near && Buffer.byteLength(near), MAX_LINE - 10);
});

test('an output over the line limit fails its item, not the process', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  let [got, ans] = await c.ask({ s: 'z'.repeat(MAX_LINE) });
  assert.deepEqual([got, ans.type, ans.retryable], [[], 'error', false]);
  assert.match(ans.message, /over the 8388608-byte line limit/);
  [, ans] = await c.ask({ still: 'alive' });
  assert.equal(ans.type, 'done');
});

test('an envelope\'s answers go out while a later item still works', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-gate-'));
  t.after(() => fs.rmSync(d, { recursive: true, force: true }));
  const slow = c.item({ do: 'slow' });
  const blocked = c.item({ do: 'gate', path: path.join(d, 'gate') });
  c.sendBatch(slow, blocked);
  let [, ans] = await c.answer(); // would hang if answers waited for the whole envelope
  assert.deepEqual([ans.type, ans.delivery], ['done', slow.delivery]);
  fs.writeFileSync(path.join(d, 'gate'), '');
  [, ans] = await c.answer();
  assert.deepEqual([ans.type, ans.delivery], ['done', blocked.delivery]);
});

test('a batch handler gets an envelope without the linger', async (t) => {
  const c = child(t, 'batch', '4', '30000'); // a linger no test waits for
  await c.hello();
  const items = Array.from({ length: 10 }, (_, i) => c.item({ i }));
  c.sendBatch(...items);
  const sizes = [];
  for (const it of items) {
    const [got, ans] = await c.answer();
    assert.deepEqual([ans.type, ans.delivery], ['done', it.delivery]);
    sizes.push(got.find((m) => m.type === 'emit').payload.n);
  }
  assert.deepEqual(sizes, [4, 4, 4, 4, 4, 4, 4, 4, 2, 2]);
});

test('workdir is MILLSTREAM_WORKDIR', async (t) => {
  const wd = fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-test-'));
  t.after(() => fs.rmSync(wd, { recursive: true, force: true }));
  const c = new Child(['map'], { MILLSTREAM_WORKDIR: wd });
  t.after(() => c.kill());
  await c.hello();
  const [got] = await c.ask({ do: 'workdir' });
  assert.deepEqual(got[0].payload, { workdir: wd, exists: true });
});

test('a workdir outside the engine is removed at exit', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const [got] = await c.ask({ do: 'workdir' });
  assert.equal(got[0].payload.exists, true);
  assert.equal((await c.shutdown())[0], 0);
  assert.equal(fs.existsSync(got[0].payload.workdir), false);
});

test('config is checked and typed', async (t) => {
  let c = child(t, 'map');
  await c.hello({ 'min-rooms': 3, greeting: 'hey', ratio: 1 });
  let [got] = await c.ask({ do: 'config' });
  assert.deepEqual(got[0].payload, { minRooms: 3, greeting: 'hey', ratio: 1 });
  c = child(t, 'map');
  await c.hello({});
  [got] = await c.ask({ do: 'config' });
  assert.deepEqual(got[0].payload, { minRooms: 2, greeting: 'hi', ratio: 0.5 });
});

test('a bad config fails each item, not the process', async (t) => {
  const c = child(t, 'map');
  assert.equal((await c.hello({ 'min-rooms': 'not-a-number', greeting: 12345 })).type, 'ready');
  for (let i = 0; i < 2; i++) {
    const [got, ans] = await c.ask({ do: 'config' });
    assert.deepEqual([got, ans.type, ans.retryable], [[], 'error', false]);
    assert.match(ans.message, /min-rooms/);
    assert.match(ans.message, /greeting/);
  }
  assert.equal((await c.shutdown())[0], 0);
  assert.match(c.stderr, /bad config/);
});

test('unknown keys and message types are ignored', async (t) => {
  const c = child(t, 'map');
  assert.equal((await c.hello({}, { lessons: [{ x: 1 }] })).type, 'ready');
  c.send({ type: 'future-thing', x: 1 });
  const [got, ans] = await c.ask({ a: 1 }, { artifacts: [], extra: { n: [1] } });
  assert.deepEqual([ans.type, got[0].payload], ['done', { a: 1 }]);
});

test('a window written ahead is answered in order', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const items = Array.from({ length: 64 }, (_, i) => c.item({ i, pad: 'x'.repeat(5000) }));
  c.send(...items);
  for (const it of items) {
    const [got, ans] = await c.answer();
    assert.equal(ans.delivery, it.delivery);
    assert.equal(got[0].payload.i, it.payload.i);
  }
});

test('answers go out while a later item still works', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-gate-'));
  t.after(() => fs.rmSync(d, { recursive: true, force: true }));
  const slow = c.item({ do: 'slow' });
  const blocked = c.item({ do: 'gate', path: path.join(d, 'gate') });
  c.send(slow, blocked);
  let [, ans] = await c.answer(); // would hang if answers waited for the whole run
  assert.deepEqual([ans.type, ans.delivery], ['done', slow.delivery]);
  fs.writeFileSync(path.join(d, 'gate'), '');
  [, ans] = await c.answer();
  assert.deepEqual([ans.type, ans.delivery], ['done', blocked.delivery]);
});

test('a line longer than one read', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const big = 'é'.repeat(3 << 20);
  const [got] = await c.ask({ big });
  assert.equal(got[0].payload.big, big);
});

test('batch gets what was written ahead; a result per item', async (t) => {
  const c = child(t, 'batch', '8', '200');
  assert.deepEqual(await c.hello(), { type: 'ready', window: 64, batch: true });
  const items = Array.from({ length: 10 }, (_, i) => c.item({ i }));
  items[2].payload = { do: 'raise' };
  items[3].payload = { do: 'abstain' };
  c.send(...items);
  const sizes = [];
  for (const [n, it] of items.entries()) {
    const [got, ans] = await c.answer();
    assert.equal(ans.delivery, it.delivery);
    if (n === 2) {
      assert.deepEqual([ans.type, ans.retryable], ['error', false]);
      assert.match(ans.message, /RangeError: bad item/);
    } else if (n === 3) {
      assert.deepEqual(ans, { type: 'abstain', delivery: it.delivery, reason: 'not this one' });
    } else {
      assert.equal(ans.type, 'done');
      const emits = got.filter((m) => m.type === 'emit');
      assert.equal(emits.length, 1);
      sizes.push(emits[0].payload.n);
    }
  }
  assert.deepEqual(sizes, [8, 8, 8, 8, 8, 8, 2, 2]);
});

test('batch linger runs a partial batch', async (t) => {
  const c = child(t, 'batch', '64', '50');
  await c.hello();
  c.send(c.item({ i: 0 }), c.item({ i: 1 }));
  const [got, ans] = await c.answer();
  assert.deepEqual(got.map((m) => m.type), ['metric', 'metric', 'emit']);
  assert.deepEqual([ans.type, got[2].payload, got[1].delivery], ['done', { n: 2, i: 0 }, 'dl-2']);
});

test('an async batch handler', async (t) => {
  const c = child(t, 'batch-async');
  await c.hello();
  const items = Array.from({ length: 6 }, (_, i) => c.item({ i }));
  c.send(...items);
  for (const it of items) {
    const [got, ans] = await c.answer();
    assert.deepEqual([ans.type, ans.delivery, got[0].payload], ['done', it.delivery, it.payload]);
  }
  assert.equal((await c.shutdown())[0], 0);
});

test('a batch handler that throws fails every item of the batch', async (t) => {
  const c = child(t, 'batch', '4', '50');
  await c.hello();
  const items = [c.item({ i: 0 }), c.item({ do: 'boom-all' })];
  c.send(...items);
  for (const it of items) {
    const [got, ans] = await c.answer();
    assert.deepEqual([got, ans.type, ans.delivery], [[], 'error', it.delivery]);
    assert.match(ans.message, /Error: the whole batch/);
  }
  assert.equal((await c.shutdown())[0], 0);
  assert.match(c.stderr, /at .*batched.*action\.js/);
});

test('a batch handler returning the wrong count fails the batch', async (t) => {
  const c = child(t, 'batch-short');
  await c.hello();
  const items = Array.from({ length: 4 }, (_, i) => c.item({ i }));
  c.send(...items);
  for (const it of items) {
    const [, ans] = await c.answer();
    assert.deepEqual([ans.type, ans.delivery], ['error', it.delivery]);
    assert.match(ans.message, /returned 3 results for 4 items/);
  }
});

test('shutdown answers a pending batch first', async (t) => {
  const c = child(t, 'batch', '64', '5000');
  await c.hello();
  c.send(c.item({ i: 0 }), { type: 'shutdown' });
  const [, ans] = await c.answer();
  assert.equal(ans.type, 'done');
  assert.equal(await c.exited, 0);
});

test('the end of stdin answers a pending batch first', async (t) => {
  const c = child(t, 'batch', '64', '5000');
  await c.hello();
  c.send(c.item({ i: 0 }));
  c.p.stdin.end();
  const [, ans] = await c.answer();
  assert.equal(ans.type, 'done');
  assert.equal(await c.exited, 0);
});

test('the end of stdin waits for an async answer', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  c.send(c.item({ do: 'async', n: 1 }));
  c.p.stdin.end();
  const [got, ans] = await c.answer();
  assert.deepEqual([ans.type, got[0].payload], ['done', { late: 1 }]);
  assert.equal(await c.exited, 0);
});

// -- state per key

const STATEFUL = { events: { ttl: '720h0m0s', maxBytes: 64 } };

test('ready declares state only when hello names a stateful inlet', async (t) => {
  assert.deepEqual(await child(t, 'map').hello({}, { state: STATEFUL }), { type: 'ready', window: 64, batch: true, state: true });
  assert.deepEqual(await child(t, 'map').hello({}, { state: {} }), { type: 'ready', window: 64, batch: true });
});

test('the state is read, and written before done in the fast shape', async (t) => {
  const c = child(t, 'map');
  await c.hello({}, { state: STATEFUL });
  c.send(c.item({ do: 'count' }, { key: 'u-7', inlet: 'events', state: { n: 4 } }));
  assert.equal(await c.rawLine(), '{"type":"emit","delivery":"dl-1","key":"u-7","payload":{"n":5,"was":{"n":4}}}');
  assert.equal(await c.rawLine(), '{"type":"state","delivery":"dl-1","state":{"n":5}}');
  assert.equal(await c.rawLine(), '{"type":"done","delivery":"dl-1"}');
  let [got, ans] = await c.ask({ do: 'count' }, { inlet: 'events' }); // no state: a first record
  assert.deepEqual([got.map((m) => m.type), got[0].payload, got[1].state, ans.type], [['emit', 'state'], { n: 1, was: 'none' }, { n: 1 }, 'done']);
  [got, ans] = await c.ask({ x: 1 }, { inlet: 'events', state: { n: 1 } }); // not set: left alone
  assert.deepEqual([got.map((m) => m.type), ans.type], [['emit'], 'done']);
  [got, ans] = await c.ask({ do: 'count-async' }, { inlet: 'events' });
  assert.deepEqual([got.map((m) => m.type), got[1].state, ans.type], [['emit', 'state'], { n: 1 }, 'done']);
});

test('clearState writes null; the last call wins', async (t) => {
  const c = child(t, 'map');
  await c.hello({}, { state: STATEFUL });
  let [got, ans] = await c.ask({ do: 'clear' }, { inlet: 'events', state: 's' });
  assert.deepEqual([got[0].payload, got[1], ans.type], [{ was: 's' }, { type: 'state', delivery: 'dl-1', state: null }, 'done']);
  [got, ans] = await c.ask({ do: 'set-state', state: null }, { inlet: 'events' });
  assert.deepEqual([got[1].state, ans.type], [null, 'done']);
});

test('a failing handler stages nothing', async (t) => {
  const c = child(t, 'map');
  await c.hello({}, { state: STATEFUL });
  const [got, ans] = await c.ask({ do: 'count-raise' }, { inlet: 'events', state: { n: 1 } });
  assert.deepEqual([got, ans.type, ans.retryable], [[], 'error', false]);
  assert.match(ans.message, /failed after staging/);
});

test('a refused state fails the item in the engine\'s words, even if caught', async (t) => {
  const c = child(t, 'map');
  await c.hello({}, { state: STATEFUL });
  const cases = [
    [{ key: undefined, inlet: 'events', id: 'events/0/17' }, { n: 1 }, 'item events/0/17 has no key, so it has no state: a state message is only for keyed records (route keyless ones elsewhere, or stage no state for them)'],
    [{ inlet: 'audit' }, { n: 1 }, 'inlet audit keeps no state: add --state audit to the action line, or stage no state for its items'],
    [{ key: 'u-7', inlet: 'events' }, 'x'.repeat(63), 'the state staged for key "u-7" is 65 bytes, over max-bytes 64 bytes (--state events,max-bytes=…): keep less per key, or raise max-bytes (at most 1 MiB)'],
  ];
  for (const [fields, state, want] of cases) {
    for (const ignore of [false, true]) {
      const [got, ans] = await c.ask({ do: 'set-state', state, ignore }, fields);
      assert.deepEqual(ans, { type: 'error', delivery: ans.delivery, message: want, retryable: false });
      assert.equal(got.some((m) => m.type === 'state'), false); // emits, if any, the engine drops
    }
  }
  let [got, ans] = await c.ask({ do: 'set-state', state: 'x'.repeat(62) }, { inlet: 'events' }); // 64 bytes: at the limit
  assert.deepEqual([got[1].state, ans.type], ['x'.repeat(62), 'done']);
  [got, ans] = await c.ask({ do: 'set-state', state: 'x'.repeat(63) }, { key: undefined, keyBase64: '/w==', inlet: 'events' });
  assert.match(ans.message, /key "\/w==" is 65 bytes/);
});

test('without state in hello, every inlet keeps none', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  const [, ans] = await c.ask({ do: 'count' }, { inlet: 'events' });
  assert.equal(ans.message, 'inlet events keeps no state: add --state events to the action line, or stage no state for its items');
});

test('a batch handler stages each item\'s state, in the envelope', async (t) => {
  const c = child(t, 'batch', '8', '5');
  await c.hello({}, { state: { events: { maxBytes: 65536 } } });
  c.sendBatch(c.item({ do: 'count' }, { key: 'a', inlet: 'events', state: { n: 1 } }), c.item({ do: 'raise' }, { key: 'b', inlet: 'events' }), c.item({ do: 'count' }, { key: 'c', inlet: 'events' }));
  const msgs = [];
  for (let i = 0; i < 7; i++) msgs.push(await c.read());
  assert.deepEqual(c.frames, ['line', ['batch', 7]]);
  assert.deepEqual(msgs.map((m) => [m.type, m.delivery]), [['emit', 'dl-1'], ['state', 'dl-1'], ['done', 'dl-1'], ['error', 'dl-2'], ['emit', 'dl-3'], ['state', 'dl-3'], ['done', 'dl-3']]);
  assert.deepEqual([msgs[1].state, msgs[5].state], [{ n: 2 }, { n: 1 }]);
});

// -- concurrent handlers

const touch = (file) => fs.writeFileSync(file, '');

test('ready declares concurrency only for a concurrent handler', async (t) => {
  assert.deepEqual(await child(t, 'async').hello(), { type: 'ready', window: 128, batch: true, concurrent: true, cancel: true });
  assert.equal((await child(t, 'async', '8').hello()).window, 8);
  assert.deepEqual(await child(t, 'promise-concurrent').hello({}, { state: { events: {} } }),
    { type: 'ready', window: 128, batch: true, concurrent: true, cancel: true, state: true });
  assert.deepEqual(await child(t, 'async-sequential').hello(), { type: 'ready', window: 64, batch: true });
  assert.deepEqual(await child(t, 'map').hello(), { type: 'ready', window: 64, batch: true });
  assert.equal((await child(t, 'async-batch', '4', '10').hello()).concurrent, true);
});

test('an async handler: answered as each settles, each exactly once', async (t) => {
  const c = child(t, 'async');
  await c.hello();
  // each item ends only after the next one: the answers come reversed, and only if they run at once
  const items = [];
  for (let i = 0; i < 40; i++) items.push(c.item({ do: 'after', tag: i, ...(i < 39 ? { after: i + 1 } : {}) }, { key: `k${i}` }));
  c.sendBatch(...items);
  const [got, order] = await c.answers(items.length);
  assert.deepEqual(order, items.map((it) => it.delivery).reverse());
  for (const it of items) {
    const [msgs, ans] = got.get(it.delivery);
    assert.deepEqual([ans.type, msgs.map((m) => m.type)], ['done', ['emit']]);
    assert.deepEqual([msgs[0].payload, msgs[0].key], [it.payload, it.key]);
  }
  assert.ok(c.frames.slice(1).every((f) => f[0] === 'batch'), JSON.stringify(c.frames)); // an envelope's answers: envelopes
  c.send(c.item({ x: 1 }));
  await c.answers(1);
  assert.deepEqual(c.frames.slice(-2), ['line', 'line']);
  assert.equal((await c.shutdown())[0], 0);
});

test('an async handler: a later item is answered while an earlier one waits', async (t) => {
  const c = child(t, 'async');
  await c.hello();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'millrace-test-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const gates = [0, 1, 2].map((i) => path.join(dir, `g${i}`));
  const items = gates.map((g) => c.item({ do: 'gate', path: g }));
  c.send(...items);
  for (const i of [2, 0, 1]) {
    touch(gates[i]);
    const [, order] = await c.answers(1);
    assert.deepEqual(order, [items[i].delivery]);
  }
});

test('in flight never exceeds the window', async (t) => {
  const c = child(t, 'async', '5');
  await c.hello();
  const items = [];
  for (let i = 0; i < 23; i++) items.push(c.item({ do: 'fill' })); // each waits until 5 are in flight
  c.sendBatch(...items);
  const [got] = await c.answers(items.length);
  assert.deepEqual(new Set([...got.values()].map(([, a]) => a.type)), new Set(['done']));
  const [msgs] = await c.ask({ do: 'status' });
  assert.equal(msgs[0].payload.peak, 5);
});

test('a cancel answers only the hung item, its signal aborted', async (t) => {
  const c = child(t, 'async', '64');
  await c.hello();
  // 1 hung call among 1,000 at 64 in flight (the SDK holds back what is over its window)
  const items = [];
  for (let i = 0; i < 999; i++) items.push(c.item({ i }, { key: `k${i % 97}` }));
  const hung = c.item({ do: 'hang' });
  items.splice(7, 0, hung);
  for (let n = 0; n < items.length; n += 100) c.sendBatch(...items.slice(n, n + 100));
  const [got] = await c.answers(items.length - 1);
  assert.ok(!got.has(hung.delivery));
  assert.deepEqual(new Set([...got.values()].map(([, a]) => a.type)), new Set(['done']));
  c.send({ type: 'cancel', delivery: hung.delivery });
  const [got2] = await c.answers(1);
  const [msgs, ans] = got2.get(hung.delivery);
  assert.deepEqual([msgs, ans.type, ans.retryable], [[], 'error', true]);
  assert.match(ans.message, /^cancelled: /);
  // a cancel for a delivery answered already, or never held, is ignored
  c.send({ type: 'cancel', delivery: hung.delivery }, { type: 'cancel', delivery: 'dl-none' });
  const [st] = await c.ask({ do: 'status' });
  assert.deepEqual(st[0].payload.cancelled, [hung.delivery]);
  assert.deepEqual(await c.shutdown(), [0, []]);
});

test('a cancel inside an envelope, and of an item waiting for the window', async (t) => {
  const c = child(t, 'async', '2');
  await c.hello();
  const [a, b, w] = [c.item({ do: 'hang' }), c.item({ do: 'hang' }), c.item({ x: 'waits' })];
  c.sendBatch(a, b, w); // the window (2) is full: w waits for a slot
  c.sendBatch({ type: 'cancel', delivery: a.delivery });
  let [got, order] = await c.answers(2); // a cancelled, then w runs in its slot
  assert.deepEqual(order, [a.delivery, w.delivery]);
  assert.equal(got.get(w.delivery)[1].type, 'done');
  const x = c.item({ do: 'hang' });
  const y = c.item({ y: 1 });
  c.send(x, y); // the window is full again (b, x): y waits, then is cancelled before it runs
  c.send({ type: 'cancel', delivery: y.delivery });
  [got, order] = await c.answers(1);
  assert.deepEqual([order, got.get(y.delivery)[1].retryable], [[y.delivery], true]);
  c.send({ type: 'cancel', delivery: b.delivery }, { type: 'cancel', delivery: x.delivery });
  [got, order] = await c.answers(2);
  assert.deepEqual(order, [b.delivery, x.delivery]);
  const [st] = await c.ask({ do: 'status' });
  // a may have been cancelled before it ran (a cancel read with its envelope); y never ran
  assert.deepEqual(st[0].payload.cancelled.filter((d) => d !== a.delivery), [b.delivery, x.delivery]);
});

test('console.log and the log inside concurrent handlers are tagged with their own delivery', async (t) => {
  const c = child(t, 'async');
  await c.hello();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'millrace-test-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const [ga, gb] = [path.join(dir, 'a'), path.join(dir, 'b')];
  const a = c.item({ do: 'talk', path: ga });
  const b = c.item({ do: 'talk', path: gb }, { attempt: 2 });
  c.send(a, b);
  touch(gb); // b ends before a
  await c.answers(1);
  touch(ga);
  await c.answers(1);
  assert.equal((await c.shutdown())[0], 0);
  const recs = c.stderr.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(recs.length, 6, c.stderr);
  for (const r of recs) {
    assert.ok(r.msg.endsWith(r.item) || r.msg.startsWith('part of ' + r.item), JSON.stringify(r));
    assert.equal(r.attempt, r.item === b.id ? 2 : 1);
    assert.equal(r.delivery, r.item === b.id ? b.delivery : a.delivery);
  }
  assert.ok(recs.some((r) => r.msg === `part of ${a.id} ends`));
});

test('state, retry, abstain and metrics with concurrency', async (t) => {
  const c = child(t, 'async');
  await c.hello({}, { state: { events: { maxBytes: 64 } } });
  const items = [];
  for (let i = 0; i < 10; i++) items.push(c.item({ do: 'count' }, { key: `k${i}`, inlet: 'events', state: { n: i } }));
  items.push(c.item({ do: 'retry' }), c.item({ do: 'abstain' }), c.item({ do: 'raise' }));
  c.sendBatch(...items);
  const [got] = await c.answers(items.length);
  items.slice(0, 10).forEach((it, i) => {
    const [msgs, ans] = got.get(it.delivery);
    assert.deepEqual(msgs.map((m) => m.type), ['metric', 'emit', 'state']);
    assert.deepEqual([msgs[1].payload, msgs[2].state, ans.type], [{ n: i + 1 }, { n: i + 1 }, 'done']);
  });
  assert.equal(got.get(items[10].delivery)[1].retryable, true);
  assert.deepEqual(got.get(items[11].delivery)[1], { type: 'abstain', delivery: items[11].delivery, reason: 'unsure' });
  assert.match(got.get(items[12].delivery)[1].message, /RangeError: boom/);
});

test('mapKeyed with an async handler', async (t) => {
  const c = child(t, 'async-keyed');
  await c.hello();
  const [got, ans] = await c.ask({ x: 1 }, { key: 'k' });
  assert.deepEqual([got.map((m) => m.key), ans.type], [['a', 'k'], 'done']);
});

test('async batches run at once, each item answered', async (t) => {
  const c = child(t, 'async-batch', '4', '30000');
  await c.hello({}, { state: { events: { maxBytes: 100 } } });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'millrace-test-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const gate = path.join(dir, 'g');
  const items = [c.item({ do: 'gate', path: gate }), c.item({ i: 1 }), c.item({ i: 2 }), c.item({ i: 3 }), c.item({ i: 4 }),
    c.item({ do: 'count' }, { key: 'x', inlet: 'events', state: { n: 4 } }), c.item({ do: 'raise' }), c.item({ do: 'abstain' })];
  c.sendBatch(...items);
  let [got, order] = await c.answers(4); // the second batch (4 of 8) is answered, the first waits
  assert.deepEqual(order, items.slice(4).map((it) => it.delivery));
  const [msgs] = got.get(items[5].delivery);
  assert.deepEqual([msgs.map((m) => m.type), msgs[1].state], [['emit', 'state'], { n: 5 }]);
  assert.match(got.get(items[6].delivery)[1].message, /RangeError: bad item/);
  assert.equal(got.get(items[7].delivery)[1].type, 'abstain');
  touch(gate);
  [got, order] = await c.answers(4);
  assert.deepEqual(order, items.slice(0, 4).map((it) => it.delivery));
  assert.deepEqual(c.frames.slice(1), [['batch', 8], ['batch', 12]]);
  c.send(c.item({ i: 9 }), c.item({ i: 10 }), { type: 'shutdown' }); // the linger is 30 s: shutdown runs them
  await c.answers(2);
  assert.equal(await c.exited, 0);
});

test('a cancel of one item of an async batch', async (t) => {
  const c = child(t, 'async-batch', '2', '5');
  await c.hello();
  const [a, b] = [c.item({ do: 'hang' }), c.item({ i: 1 })];
  c.sendBatch(a, b);
  c.send({ type: 'cancel', delivery: b.delivery }); // b's batch hangs on a
  let [got, order] = await c.answers(1);
  assert.deepEqual([order, got.get(b.delivery)[1].retryable], [[b.delivery], true]);
  c.send({ type: 'cancel', delivery: a.delivery }); // a's signal: the batch goes on, its answers dropped
  [got, order] = await c.answers(1);
  assert.deepEqual(order, [a.delivery]);
  const [, ans] = await c.ask({ i: 2 });
  assert.equal(ans.type, 'done');
});

test('shutdown and the end of stdin answer what is in flight', async (t) => {
  for (const end of ['shutdown', 'eof']) {
    const c = child(t, 'async');
    await c.hello();
    const items = [0, 1, 2, 3, 4].map(() => c.item({ do: 'sleep', ms: 30 }));
    c.send(...items);
    if (end === 'shutdown') c.send({ type: 'shutdown' });
    else c.p.stdin.end();
    await c.answers(5);
    assert.equal(await c.exited, 0);
  }
});

test('a plain function returning promises runs at once with concurrent: true', async (t) => {
  const c = child(t, 'promise-concurrent');
  await c.hello();
  const items = [0, 1, 2, 3].map((i) => c.item({ do: 'after', tag: i, after: i < 3 ? i + 1 : undefined }));
  c.send(...items);
  const [, order] = await c.answers(items.length);
  assert.deepEqual(order, items.map((it) => it.delivery).reverse());
});

test('an async handler with concurrent: false stays sequential', async (t) => {
  const c = child(t, 'async-sequential');
  await c.hello();
  const items = [c.item({ do: 'sleep', ms: 60 }), c.item({ x: 1 })];
  c.send(...items);
  const [, order] = await c.answers(2);
  assert.deepEqual(order, items.map((it) => it.delivery));
  const [st] = await c.ask({ do: 'status' });
  assert.equal(st[0].payload.peak, 1);
});
