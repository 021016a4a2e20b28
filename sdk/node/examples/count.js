#!/usr/bin/env node
'use strict';
// A running count per key on the millrace SDK: each item's output is how many items its key
// has had, kept in the key's state. A keyless item has no state: it counts 1.
const millrace = require('../millrace.js');

millrace.map((payload, item) => {
  const state = item.state;
  const n = (state && typeof state === 'object' && Number.isInteger(state.n) ? state.n : 0) + 1;
  if (item.key !== null) item.setState({ n });
  return { n };
});
