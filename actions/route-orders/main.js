// route-orders: a Millstream action in Node.js, no dependencies.
// One JSON object per line on stdin; answers on stdout; logs on stderr.
'use strict';
const readline = require('node:readline');

let vatRate = null;      // null: the config was malformed, every item is answered with an error
let configError = '';

function send(msg) {
  process.stdout.write(JSON.stringify(msg) + '\n');
}

function hello(msg) {
  const rate = (msg.config || {})['vat-rate'];
  if (typeof rate === 'number' && rate >= 0) {
    vatRate = rate;
  } else {
    configError = `config vat-rate must be a non-negative number, got ${JSON.stringify(rate)}`;
    console.error(JSON.stringify({ level: 'error', msg: configError }));
  }
  send({ type: 'ready' });
}

function item(msg) {
  const delivery = msg.delivery;
  if (vatRate === null) {
    send({ type: 'error', delivery, message: configError, retryable: false });
    return;
  }
  const order = msg.payload;
  if (!order || typeof order !== 'object' || !Array.isArray(order.lines) || order.lines.length === 0) {
    send({ type: 'error', delivery, message: 'order has no lines', retryable: false });
    return;
  }
  // One output per SKU, keyed by it: the outputs of one item must be keyed distinctly, so an
  // order that lists a SKU twice gets one line with the quantities and amounts added up.
  const bySku = new Map();
  for (const line of order.lines) {
    const sku = String(line.sku);
    const amount = Math.round(line.qty * line.price * 100) / 100;
    const seen = bySku.get(sku);
    if (seen) {
      seen.qty += line.qty;
      seen.amount = Math.round((seen.amount + amount) * 100) / 100;
    } else {
      bySku.set(sku, { order_id: order.order_id, sku: line.sku, qty: line.qty, amount });
    }
  }
  let net = 0;
  for (const [sku, payload] of bySku) {
    net += payload.amount;
    send({
      type: 'emit', delivery, outlet: 'lines', key: sku,
      headers: [{ key: 'order-id', value: String(order.order_id) }],
      payload,
    });
  }
  net = Math.round(net * 100) / 100;
  const gross = Math.round(net * (1 + vatRate) * 100) / 100;
  send({
    type: 'emit', delivery, outlet: 'totals', key: String(order.customer),
    headers: [{ key: 'order-id', value: String(order.order_id) }],
    payload: { order_id: order.order_id, customer: order.customer, lines: order.lines.length, net, gross },
  });
  send({ type: 'metric', delivery, name: 'order_lines', value: order.lines.length });
  send({ type: 'done', delivery });
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (text) => {
  let msg;
  try {
    msg = JSON.parse(text);
  } catch (err) {
    console.error(JSON.stringify({ level: 'error', msg: 'not JSON', line: text.slice(0, 80) }));
    return;
  }
  switch (msg.type) {
    case 'hello': hello(msg); break;
    case 'item': item(msg); break;
    case 'shutdown': process.exit(0); break;
    default: break; // unknown messages are ignored: the protocol may grow
  }
});
rl.on('close', () => process.exit(0));
