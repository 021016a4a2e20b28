#!/usr/bin/env node
'use strict';
// The action test/millrace.test.js drives: argv[2] picks the handler, payload "do" what it does.
const fs = require('fs');
const path = require('path');
const millrace = require('../millrace.js');

const sleep = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
const hex = (v) => (Buffer.isBuffer(v) ? v.toString('hex') : v);

function handle(payload, item) {
  const d = payload && payload.do;
  switch (d) {
    case 'abstain': throw new millrace.Abstain('unsure');
    case 'retry': throw new millrace.Retryable('try again');
    case 'raise': throw new RangeError('boom');
    case 'reject': return Promise.reject(new Error('async boom'));
    case 'async': return new Promise((resolve) => setTimeout(() => resolve({ late: payload.n }), 5));
    case 'metric': item.metric('m', 2.5, { l: 'v' }); break;
    case 'log': item.log.info('hello log', { n: 1 }); break;
    case 'print': console.log('stray print'); break;
    case 'print-async': return new Promise((resolve) => setTimeout(() => { console.log('late print'); resolve(payload); }, 5));
    case 'workdir':
      fs.writeFileSync(path.join(item.workdir, 'f.txt'), 'x');
      return { workdir: item.workdir, exists: fs.existsSync(path.join(millrace.workdir(), 'f.txt')) };
    case 'config': return item.config;
    case 'key':
      return {
        key: hex(item.key),
        headers: item.headers.map(([k, v]) => [k, hex(v)]),
        id: item.id, attempt: item.attempt, idempotencyKey: item.idempotencyKey,
      };
    case 'bigint': return 10n;
    case 'slow': sleep(60); break;
    case 'gate': while (!fs.existsSync(payload.path)) sleep(10); break; // a handler still at work
    case 'count': case 'count-raise': { // a running count per key in the state
      const was = item.state;
      item.setState({ n: ((was && was.n) || 0) + 1 });
      if (payload.do === 'count-raise') throw new Error('failed after staging');
      return { n: ((was && was.n) || 0) + 1, was: was === undefined ? 'none' : was };
    }
    case 'count-async': // staged after an await: still written, before done
      return new Promise((resolve) => setTimeout(resolve, 5)).then(() => { item.setState({ n: 1 }); return {}; });
    case 'clear': item.setState({ n: 99 }); item.clearState(); return { was: item.state };
    case 'set-state': // payload.state as the new state; a refusal ignored when asked
      try {
        item.setState(payload.state);
      } catch (err) {
        if (!payload.ignore || !(err instanceof millrace.StateError)) throw err;
        return { refused: err.message };
      }
      return {};
    default:
  }
  return payload;
}

function keyed(payload) {
  if (payload.do === 'none') return [];
  return [
    millrace.output(payload, { key: 'a' }),
    millrace.output(payload, { key: Buffer.from([0xff, 0x00]), outlet: 'other', headers: [['h', Buffer.from([0xfe])], ['t', 'v'], ['n', null]] }),
    payload,
  ];
}

function batched(items) {
  if (items.some((i) => i.payload && i.payload.do === 'boom-all')) throw new Error('the whole batch');
  return items.map((it, n) => {
    const d = it.payload && it.payload.do;
    if (d === 'raise') return new RangeError('bad item');
    if (d === 'abstain') return new millrace.Abstain('not this one');
    if (d === 'count') {
      const n = ((it.state && it.state.n) || 0) + 1;
      it.setState({ n });
      return { n };
    }
    it.metric('batch_size', items.length);
    return { n: items.length, i: n };
  });
}

const config = { minRooms: { type: 'integer', default: 2 }, greeting: { type: 'string', default: 'hi' }, ratio: { type: 'number', default: 0.5 } };

// -- concurrent handlers: payload "do" again picks what the handler does
const peak = { now: 0, max: 0 }; // handlers at work at once, and the most seen
const cancelled = []; // deliveries whose signal was aborted
let fullWindow = null; // resolves once the window is full: "fill" handlers wait for it
let fillResolve;
const delay = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFile(file) {
  while (!fs.existsSync(file)) await delay(5);
}

const finished = new Map(); // tag -> { promise, resolve }: "after" items wait for another's end
const finish = (tag) => {
  if (!finished.has(tag)) {
    let resolve;
    const promise = new Promise((r) => { resolve = r; });
    finished.set(tag, { promise, resolve });
  }
  return finished.get(tag);
};

async function ahandle(payload, item) {
  const d = payload && payload.do;
  peak.now++;
  peak.max = Math.max(peak.max, peak.now);
  try {
    switch (d) {
      case 'fill':
        if (!fullWindow) fullWindow = new Promise((r) => { fillResolve = r; });
        if (peak.now >= Number(process.argv[3])) fillResolve();
        await fullWindow;
        break;
      case 'sleep': await delay(payload.ms); break;
      case 'after': // ends only after the item tagged payload.after: needs them at once
        if (payload.after !== undefined) await finish(payload.after).promise;
        finish(payload.tag).resolve();
        break;
      case 'gate': await waitFile(payload.path); break;
      case 'hang':
        item.metric('before_hang', 1);
        await new Promise((resolve, reject) => item.signal.addEventListener('abort', () => { cancelled.push(item.delivery); reject(new Error('aborted')); }));
        break;
      case 'talk': // prints and logs around an await: each tagged with its own delivery
        console.log('begin', item.id);
        process.stdout.write('part of ' + item.id);
        millrace.log.info('log of ' + item.id);
        await waitFile(payload.path);
        console.log(' ends');
        break;
      case 'status': return { peak: peak.max, cancelled };
      case 'count': {
        await delay(1);
        const n = ((item.state && item.state.n) || 0) + 1;
        item.setState({ n });
        item.metric('n', n);
        return { n };
      }
      case 'abstain': throw new millrace.Abstain('unsure');
      case 'retry': await delay(1); throw new millrace.Retryable('try again');
      case 'raise': throw new RangeError('boom');
      default:
    }
    return payload;
  } finally {
    peak.now--;
  }
}

async function abatched(items) {
  await delay(1);
  const out = [];
  for (const it of items) {
    const d = it.payload && it.payload.do;
    if (d === 'gate') await waitFile(it.payload.path);
    if (d === 'hang') await new Promise((resolve) => it.signal.addEventListener('abort', resolve));
    if (d === 'raise') out.push(new RangeError('bad item'));
    else if (d === 'abstain') out.push(new millrace.Abstain('not this one'));
    else if (d === 'count') {
      const n = ((it.state && it.state.n) || 0) + 1;
      it.setState({ n });
      out.push({ n });
    } else {
      it.metric('batch_size', items.length);
      out.push({ n: items.length, p: it.payload });
    }
  }
  return out;
}

switch (process.argv[2]) {
  case 'map': millrace.map(handle, { config }); break;
  case 'keyed': millrace.mapKeyed(keyed); break;
  case 'batch': millrace.batch(batched, { size: Number(process.argv[3]), linger: Number(process.argv[4]) }); break;
  case 'batch-async': millrace.batch(async (items) => { await new Promise((r) => setTimeout(r, 5)); return items.map((i) => i.payload); }, { size: 4, linger: 20 }); break;
  case 'batch-short': millrace.batch((items) => items.slice(1), { size: 4 }); break;
  case 'async': millrace.map(ahandle, { window: process.argv[3] ? Number(process.argv[3]) : undefined }); break;
  case 'async-keyed': millrace.mapKeyed(async (payload) => { await delay(1); return [millrace.output(payload, { key: 'a' }), payload]; }); break;
  case 'async-batch': millrace.batch(abatched, { size: Number(process.argv[3]), linger: Number(process.argv[4]) }); break;
  case 'promise-concurrent': millrace.map((payload, item) => ahandle(payload, item), { concurrent: true }); break;
  case 'async-sequential': millrace.map(ahandle, { concurrent: false }); break;
  default: throw new Error('unknown mode ' + process.argv[2]);
}
