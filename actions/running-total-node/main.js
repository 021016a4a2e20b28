#!/usr/bin/env node
// running-total-node: a running total per key, on the millrace SDK. The key's state is
// {"total": N}; each amount adds to it, and the new total is written with the item's key. A
// keyless amount has no state: its total is itself.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

// millrace.js beside this file wins (an image vendors it there); in the repository the SDK is
// sdk/node.
const vendored = path.join(__dirname, 'millrace.js');
const millrace = require(fs.existsSync(vendored) ? vendored : path.join(__dirname, '..', '..', 'sdk', 'node', 'millrace.js'));

millrace.map((payload, item) => {
  if (payload && payload.reset === true) {
    if (item.key !== null) item.clearState(); // the key's next amount starts from zero
    return { total: 0 };
  }
  const amount = payload && payload.amount;
  if (typeof amount !== 'number' || !Number.isFinite(amount)) {
    throw new Error('payload has no amount (a number)'); // fails for good: --dead-letter sends it to invalid
  }
  if (item.key === null) return { total: amount }; // no key, no state
  const state = item.state; // undefined when the key has none: a first amount, or after a reset
  const before = state && typeof state.total === 'number' ? state.total : 0;
  const total = before + amount;
  item.setState({ total });
  return { total };
});
