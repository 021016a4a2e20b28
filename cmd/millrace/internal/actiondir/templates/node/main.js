#!/usr/bin/env node
// {{.Name}}: greets each name it is given, on the millrace SDK (millrace.js, vendored here).
// The protocol and the SDK: docs/protocol.md and sdk/node/README.md in the millrace repository.
'use strict';
const millrace = require('./millrace.js');

// hello's config, checked: a greeting that is not a string fails every item
const config = { greeting: { type: 'string', default: 'Hello' } };

// Waiting on a call (HTTP, a database, a model server)? Make the handler async and await the
// call: millrace.map then runs many items at once, each answered as its promise settles:
//   millrace.map(async (payload, item) => { const r = await fetch(url, { signal: item.signal }); … }, { config });
millrace.map((payload, item) => {
  const name = payload && payload.name;
  if (typeof name !== 'string' || name === '') {
    throw new Error('payload has no name'); // the item fails (not retried); logged to stderr
  }
  item.log.info('greeting', { name }); // logs go to stderr; stdout is the protocol's
{{- if .State}}
  const state = item.state; // the key's state, undefined when none
  const visits = (state && Number.isInteger(state.visits) ? state.visits : 0) + 1;
  if (item.key !== null) item.setState({ visits }); // a keyless record has no state
  return { message: `${item.config.greeting}, ${name}!`, visits }; // the state applies if this returns
{{- else}}
  return { message: `${item.config.greeting}, ${name}!` }; // one output, the item's key
{{- end}}
}, { config });
