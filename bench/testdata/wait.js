#!/usr/bin/env node
'use strict';
// The Node.js action of BenchmarkWaiting: a call per record that takes process.argv[2]
// milliseconds (a stand-in for an HTTP API: a timer), then the payload out again, its key
// kept; an async handler on the millrace SDK at its defaults.
const millrace = require('../../sdk/node/millrace.js');

const call = Number(process.argv[2]);
millrace.map(async (payload) => {
  await new Promise((resolve) => setTimeout(resolve, call));
  return payload;
});
