#!/usr/bin/env ruby
# frozen_string_literal: true

# A running count per key on the millrace SDK: each item's output is how many items its key
# has had, kept in the key's state. A keyless item has no state: it counts 1.
require_relative '../lib/millrace'

Millrace.map do |_payload, item|
  state = item.state
  n = (state.is_a?(Hash) && state['n'].is_a?(Integer) ? state['n'] : 0) + 1
  item.state = { 'n' => n } unless item.key.nil?
  { 'n' => n }
end
