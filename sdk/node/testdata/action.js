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

switch (process.argv[2]) {
  case 'map': millrace.map(handle, { config }); break;
  case 'keyed': millrace.mapKeyed(keyed); break;
  case 'batch': millrace.batch(batched, { size: Number(process.argv[3]), linger: Number(process.argv[4]) }); break;
  case 'batch-async': millrace.batch(async (items) => { await new Promise((r) => setTimeout(r, 5)); return items.map((i) => i.payload); }, { size: 4, linger: 20 }); break;
  case 'batch-short': millrace.batch((items) => items.slice(1), { size: 4 }); break;
  default: throw new Error('unknown mode ' + process.argv[2]);
}
