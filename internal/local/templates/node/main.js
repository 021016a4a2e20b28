// {{.Name}}: a Millstream action in Node.js, no dependencies.
// One JSON object per line on stdin; answers on stdout; logs on stderr.
'use strict';
const readline = require('node:readline');

let config = {};

function send(msg) {
  process.stdout.write(JSON.stringify(msg) + '\n');
}

// handle returns the outputs of one item, or throws an Error (retryable when err.retryable).
function handle(payload) {
  if (typeof config.greeting !== 'string') {
    throw new Error('config greeting must be a string');
  }
  const name = payload && typeof payload === 'object' ? payload.name : undefined;
  if (typeof name !== 'string' || name === '') {
    throw new Error('payload has no name');
  }
  return [{ message: `${config.greeting}, ${name}!` }];
}

function item(msg) {
  const delivery = msg.delivery;
  let outputs;
  try {
    outputs = handle(msg.payload);
  } catch (err) {
    send({ type: 'error', delivery, message: String(err.message || err), retryable: Boolean(err.retryable) });
    return;
  }
  for (const payload of outputs) {
    const emit = { type: 'emit', delivery, payload };
    if ('key' in msg) emit.key = msg.key;
    send(emit);
  }
  send({ type: 'done', delivery });
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (text) => {
  let msg;
  try {
    msg = JSON.parse(text);
  } catch (err) {
    console.error('{{.Name}}: an input line is not JSON');
    return;
  }
  switch (msg && msg.type) {
    case 'hello':
      config = msg.config && typeof msg.config === 'object' ? msg.config : {};
      send({ type: 'ready' });
      break;
    case 'item': item(msg); break;
    case 'shutdown': process.exit(0); break;
    default: break; // unknown messages are ignored: the protocol may grow
  }
});
rl.on('close', () => process.exit(0));
