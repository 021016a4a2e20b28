#!/usr/bin/env ruby
# frozen_string_literal: true

# The action test/test_millrace.rb drives: ARGV[0] picks the handler, payload "do" what it does.
require_relative '../lib/millrace'

def hexed(v)
  v.is_a?(String) && !v.dup.force_encoding(Encoding::UTF_8).valid_encoding? ? v.unpack1('H*') : v
end

def handle(payload, item)
  case payload.is_a?(Hash) && payload['do']
  when 'abstain' then raise Millrace::Abstain, 'unsure'
  when 'retry' then raise Millrace::Retryable, 'try again'
  when 'raise' then raise ArgumentError, 'boom'
  when 'metric' then item.metric('m', 2.5, { 'l' => 'v' })
  when 'log' then item.log.info('hello log', n: 1)
  when 'print' then puts 'stray print'
  when 'workdir'
    File.write(File.join(item.workdir, 'f.txt'), 'x')
    return { 'workdir' => item.workdir, 'exists' => File.exist?(File.join(Millrace.workdir, 'f.txt')) }
  when 'config'
    c = item.config
    return { 'min_rooms' => c.min_rooms, 'greeting' => c.greeting, 'ratio' => c.ratio }
  when 'key'
    return { 'key' => hexed(item.key), 'headers' => item.headers.map { |k, v| [k, hexed(v)] },
             'id' => item.id, 'attempt' => item.attempt, 'idempotencyKey' => item.idempotency_key }
  when 'slow' then sleep 0.06
  when 'gate' then sleep 0.01 until File.exist?(payload['path']) # a handler still at work
  when 'touch' then File.write(payload['path'], '') # opens another call's gate
  when 'hang' # until cancelled; a late result, were it sent, would be 'too late'
    begin
      File.write(payload['path'], '') if payload['path'] # it is at work
      sleep
    ensure
      puts "cleaning up #{item.delivery}"
    end
  when 'gate-print' # prints before and after its gate, tagged with its own delivery
    puts "before #{item.delivery}"
    sleep 0.01 until File.exist?(payload['path'])
    puts "after #{item.delivery}"
  when 'nan' then return Float::NAN
  when 'count', 'count-raise' # a running count per key in the state
    was = item.state
    item.state = { 'n' => ((was && was['n']) || 0) + 1 }
    raise ArgumentError, 'failed after staging' if payload['do'] == 'count-raise'

    return { 'n' => ((was && was['n']) || 0) + 1, 'was' => was }
  when 'clear'
    item.state = { 'n' => 99 }
    item.clear_state
    return { 'was' => item.state }
  when 'set-state' # payload['state'] as the new state; a refusal ignored when asked
    begin
      item.state = payload['state']
    rescue Millrace::StateError => e
      raise unless payload['ignore']

      return { 'refused' => e.message }
    end
    return {}
  end
  payload
end

case ARGV[0]
when 'map'
  Millrace.map(config: { min_rooms: [Integer, 2], greeting: [String, 'hi'], ratio: [Float, 0.5] }) { |p, i| handle(p, i) }
when 'keyed'
  Millrace.map_keyed do |payload, _item|
    next [] if payload['do'] == 'none'

    [Millrace::Output.new(payload, key: 'a'),
     Millrace::Output.new(payload, key: "\xff\x00".b, outlet: 'other', headers: [['h', "\xfe".b], %w[t v], ['n', nil]]),
     payload]
  end
when 'batch'
  Millrace.batch(size: Integer(ARGV[1]), linger: Float(ARGV[2])) do |items|
    raise 'the whole batch' if items.any? { |i| i.payload.is_a?(Hash) && i.payload['do'] == 'boom-all' }

    items.each_with_index.map do |it, n|
      case it.payload['do']
      when 'raise' then ArgumentError.new('bad item')
      when 'abstain' then Millrace::Abstain.new('not this one')
      when 'count'
        n = ((it.state && it.state['n']) || 0) + 1
        it.state = { 'n' => n }
        { 'n' => n }
      else
        it.metric('batch_size', items.length)
        { 'n' => items.length, 'i' => n }
      end
    end
  end
when 'map-concurrent'
  Millrace.map(concurrency: Integer(ARGV[1] || 8)) { |p, i| handle(p, i) }
when 'batch-concurrent'
  Millrace.batch(size: 2, linger: 5, concurrency: 4) do |items|
    items.map do |it|
      p = it.payload
      sleep 0.01 until File.exist?(p['path']) if p['do'] == 'gate'
      File.write(p['path'], '') if p['do'] == 'touch'
      p
    end
  end
when 'batch-short'
  Millrace.batch(size: 4) { |items| items.drop(1) }
end
