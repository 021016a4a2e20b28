#!/usr/bin/env ruby
# frozen_string_literal: true

# {{.Name}}: greets each name it is given, on the millrace SDK (millrace.rb, vendored here).
# The protocol and the SDK: docs/protocol.md and sdk/ruby/README.md in the millrace repository.
require_relative 'millrace'

# Waiting on a call (HTTP, a database, a model server)? Run up to 128 calls at once, each on a
# thread of its own, answered as it returns:
#   Millrace.map(config: { greeting: [String, 'Hello'] }, concurrency: Millrace::CONCURRENT_WINDOW) do |payload, item|
# hello's config, checked: a greeting that is not a String fails every item
Millrace.map(config: { greeting: [String, 'Hello'] }) do |payload, item|
  name = payload.is_a?(Hash) ? payload['name'] : nil
  # the item fails (not retried); logged to stderr
  raise ArgumentError, 'payload has no name' unless name.is_a?(String) && !name.empty?

  item.log.info('greeting', name: name) # logs go to stderr; stdout is the protocol's
{{- if .State}}
  state = item.state # the key's state, nil when none
  visits = (state.is_a?(Hash) && state['visits'].is_a?(Integer) ? state['visits'] : 0) + 1
  item.state = { 'visits' => visits } unless item.key.nil? # a keyless record has no state
  { 'message' => "#{item.config.greeting}, #{name}!", 'visits' => visits } # the state applies if this returns
{{- else}}
  { 'message' => "#{item.config.greeting}, #{name}!" } # one output, the item's key
{{- end}}
end
