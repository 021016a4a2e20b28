#!/usr/bin/env ruby
# frozen_string_literal: true

# Waiting on a call, the common case, on the millrace SDK: concurrency: 128, so up to 128
# deliveries wait at once in one process, each on a thread of its own, answered as its call
# returns. The call here is sleep 0.02, standing for an HTTP request, a query or a model; with
# Net::HTTP it is the same shape:
#
#   Millrace.map(concurrency: Millrace::CONCURRENT_WINDOW) do |payload, item|
#     res = Net::HTTP.post(URI(URL), JSON.generate(payload), 'Idempotency-Key' => item.idempotency_key)
#     raise Millrace::Retryable, "the service answered #{res.code}" unless res.is_a?(Net::HTTPSuccess)
#
#     JSON.parse(res.body)
#   end
require_relative '../lib/millrace'

Millrace.map(concurrency: Millrace::CONCURRENT_WINDOW) do |payload, _item|
  sleep 0.02 # the call
  payload
end
