#!/usr/bin/env ruby
# frozen_string_literal: true

# Echo on the millrace SDK: every item's payload out again, its key kept.
require_relative '../lib/millrace'

Millrace.map { |payload, _item| payload }
