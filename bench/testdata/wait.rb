#!/usr/bin/env ruby
# frozen_string_literal: true

# The Ruby action of BenchmarkWaiting: a call per record that takes ARGV[0] milliseconds (a
# stand-in for an HTTP API: sleep), then the payload out again, its key kept; on the Ruby SDK
# at its concurrent defaults (concurrency: Millrace::CONCURRENT_WINDOW).
require_relative '../../sdk/ruby/lib/millrace'

call = Float(ARGV.fetch(0)) / 1000
Millrace.map(concurrency: Millrace::CONCURRENT_WINDOW) do |payload, _item|
  sleep call
  payload
end
