#!/usr/bin/env node
'use strict';
// Waiting on a call, the common case, on the millrace SDK: an async handler, so up to 128
// deliveries wait at once in one process (each answered as its call settles). The call here is
// a 20 ms timer, standing for an HTTP request, a query or a model; with fetch it is the same
// shape (item.signal is aborted if the engine cancels the delivery):
//
//   millrace.map(async (payload, item) => {
//     const res = await fetch(URL, { method: 'POST', body: JSON.stringify(payload), signal: item.signal });
//     if (!res.ok) throw new millrace.Retryable(`the service answered ${res.status}`);
//     return res.json();
//   });
const { setTimeout: sleep } = require('timers/promises');
const millrace = require('../millrace.js');

millrace.map(async (payload, item) => {
  await sleep(20, undefined, { signal: item.signal }); // the call
  return payload;
});
