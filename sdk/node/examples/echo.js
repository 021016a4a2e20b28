#!/usr/bin/env node
'use strict';
// Echo on the millrace SDK: every item's payload out again, its key kept.
const millrace = require('../millrace.js');

millrace.map((payload) => payload);
