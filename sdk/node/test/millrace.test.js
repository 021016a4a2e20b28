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
  }
  wake() { for (const w of this.waiters.splice(0)) w(); }
  async rawLine() {
    const deadline = Date.now() + WAIT;
    while (!this.lines.length) {
      if (this.ended) throw new Error('stdout ended; stderr: ' + this.stderr);
      if (Date.now() > deadline) throw new Error('no line within ' + WAIT + 'ms; stderr: ' + this.stderr);
      await new Promise((r) => { this.waiters.push(r); setTimeout(r, 100); });
    }
    return this.lines.shift();
  }
  async read() { return JSON.parse(await this.rawLine()); }
  send(...msgs) { this.p.stdin.write(msgs.map((m) => JSON.stringify(m) + '\n').join('')); }
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
  assert.deepEqual(await c.hello(), { type: 'ready', window: 64 });
  assert.deepEqual(await c.shutdown(), [0, []]);
});

test('the end of stdin exits 0', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  c.p.stdin.end();
  assert.equal(await c.exited, 0);
});

test('map keeps the key and writes the fast shape', async (t) => {
  const c = child(t, 'map');
  await c.hello();
  c.send(c.item({ a: 1, t: 'é' }, { key: 'k1' }));
  assert.equal(await c.rawLine(), '{"type":"emit","delivery":"dl-1","key":"k1","payload":{"a":1,"t":"é"}}');
  assert.deepEqual(await c.read(), { type: 'done', delivery: 'dl-1' });
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
  const lines = c.stderr.trim().split('\n');
  const rec = JSON.parse(lines[0]);
  assert.deepEqual([rec.level, rec.msg, rec.n, rec.delivery, rec.item, rec.attempt], ['INFO', 'hello log', 1, 'dl-1', 't/0/1', 1]);
  assert.ok(lines.includes('stray print'), c.stderr);
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
  assert.deepEqual(await c.hello(), { type: 'ready', window: 64 });
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
