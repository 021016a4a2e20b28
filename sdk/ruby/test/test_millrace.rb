# frozen_string_literal: true

# Tests of the Ruby SDK over real pipes: each test starts testdata/action.rb as a child and
# speaks the action protocol to it. Run: rake test (in sdk/ruby), or ruby test/test_millrace.rb.
require 'minitest/autorun'
require 'json'
require 'open3'
require 'timeout'
require 'tmpdir'

require_relative 'child'

class TestMillrace < Minitest::Test
  def child(*args, **kw)
    c = Child.new(*args, **kw)
    (@children ||= []) << c
    c
  end

  def teardown
    (@children || []).each(&:kill)
  end

  def test_ready_declares_the_window_and_shutdown_exits_0
    c = child('map')
    assert_equal({ 'type' => 'ready', 'window' => 64, 'batch' => true }, c.hello)
    assert_equal ['line'], c.frames # ready: never in an envelope
    assert_equal [0, ''], c.shutdown
  end

  def test_end_of_stdin_exits_0
    c = child('map')
    c.hello
    c.close_stdin
    assert_equal 0, c.exit_code
  end

  def test_answers_take_the_framing_of_their_items_in_the_fast_shapes
    c = child('map')
    c.hello
    c.send_msgs(c.item({ 'a' => 1, 't' => 'é' }, key: 'k1'))
    assert_equal '{"type":"emit","delivery":"dl-1","key":"k1","payload":{"a":1,"t":"é"}}', c.raw_line
    assert_equal '{"type":"done","delivery":"dl-1"}', c.raw_line
    c.send_batch(c.item({ 'a' => 2 }, key: 'k2'))
    assert_equal '{"type":"batch","messages":[{"type":"emit","delivery":"dl-2","key":"k2","payload":{"a":2}},' \
                 '{"type":"done","delivery":"dl-2"}]}', c.raw_line
    got, = c.ask({ 'a' => 3 }, key: nil)
    refute got[0].key?('key')
  end

  def test_an_envelope_is_answered_in_one_envelope_in_order
    c = child('map')
    c.hello
    items = Array.new(64) { |i| c.item({ 'i' => i, 't' => "é\u2028" }, key: (i % 3).zero? ? nil : "k#{i}") }
    items[6]['payload'] = { 'do' => 'abstain' }
    c.send_batch(*items)
    items.each_with_index do |it, n|
      got, ans = c.answer
      assert_equal it['delivery'], ans['delivery']
      if n == 6
        assert_equal ['abstain', []], [ans['type'], got]
      else
        assert_equal ['done', it['payload'], it['key']], [ans['type'], got[0]['payload'], got[0]['key']]
      end
    end
    assert_equal ['line', ['batch', 127]], c.frames # ready, then one write
  end

  def test_envelopes_and_lines_mixed_with_other_messages_each_in_its_framing
    c = child('map')
    c.hello
    a, b, d, e = Array.new(4) { |i| c.item({ 'n' => i }) }
    c.send_msgs({ 'type' => 'batch', 'messages' => [] }, a, { 'type' => 'batch', 'messages' => [b, { 'type' => 'future-thing' }, d] }, e)
    c.send_batch({ 'type' => 'shutdown' })
    [a, b, d, e].each do |it|
      got, ans = c.answer
      assert_equal ['done', it['delivery'], it['payload']], [ans['type'], ans['delivery'], got[0]['payload']]
    end
    assert_equal 0, c.exit_code
    assert_equal ['line'] * 3 + [['batch', 4]] + ['line'] * 2, c.frames
  end

  def test_a_window_of_lines_is_answered_on_lines
    c = child('map')
    c.hello
    items = Array.new(8) { |i| c.item({ 'i' => i }) }
    c.send_msgs(*items)
    items.each { |it| assert_equal it['delivery'], c.answer[1]['delivery'] }
    assert_equal ['line'] * 16, c.frames[1..]
  end

  def test_answers_over_the_line_limit_are_split_across_lines
    c = child('map')
    c.hello
    big = Array.new(3) { |i| c.item({ 'big' => 'x' * (3 << 20), 'i' => i }) }
    c.send_batch(*big)
    big.each do |it|
      got, ans = c.answer
      assert_equal ['done', it['delivery'], it['payload']['i']], [ans['type'], ans['delivery'], got[0]['payload']['i']]
    end
    # raw_line checked each line against the limit; the 50 ms flush may cut earlier too
    out = c.frames[1..]
    assert_operator out.length, :>=, 2
    assert_equal 6, out.sum { |f| f == 'line' ? 1 : f[1] }
  end

  def test_frame_packs_envelopes_up_to_the_line_limit
    require_relative '../lib/millrace'
    m = ->(n) { JSON.generate('x' * (n - 2)) } # a JSON string of n bytes
    head = '{"type":"batch","messages":['.bytesize
    tail = ']}'.bytesize
    [
      [[10], ['line']],
      [[10, 20], [['batch', 2]]],
      [[3 << 20, 3 << 20, 3 << 20], [['batch', 2], 'line']],
      [[MAX_LINE - head - tail - 3, 2], [['batch', 2]]], # exactly the limit
      [[MAX_LINE - head - tail - 3, 3], %w[line line]],
      [[5, MAX_LINE - 5, 7, 8], ['line', 'line', ['batch', 2]]],
      [[MAX_LINE], ['line']]
    ].each do |sizes, want|
      lines = Millrace::Session.frame(sizes.map(&m)).split("\n", -1)
      assert_equal '', lines.pop
      got = []
      seen = []
      lines.each do |l|
        assert_operator l.bytesize, :<=, MAX_LINE
        v = JSON.parse(l)
        if v.is_a?(Hash)
          got << ['batch', v['messages'].length]
          seen.concat(v['messages'].map { |x| x.bytesize + 2 })
        else
          got << 'line'
          seen << v.bytesize + 2
        end
      end
      assert_equal [want, sizes], [got, seen], sizes.inspect
    end
  end

  def test_an_answer_near_the_line_limit_goes_on_a_line_of_its_own
    c = child('map')
    c.hello
    frame = '{"type":"emit","delivery":"dl-2","key":"k","payload":{"s":""}}'.bytesize
    c.send_batch(c.item({ 'n' => 1 }), c.item({ 's' => 'y' * (MAX_LINE - 10 - frame) }), c.item({ 'n' => 3 }))
    msgs = []
    near = nil
    while msgs.length < 6 # the 50 ms flush may cut the rest anywhere: look at that line only
      line = c.raw_line
      v = JSON.parse(line)
      if v['type'] == 'batch'
        msgs.concat(v['messages'].map { |x| [x['type'], x['delivery']] })
        next
      end
      msgs << [v['type'], v['delivery']]
      near = line if v['type'] == 'emit' && v['delivery'] == 'dl-2'
    end
    assert_equal [1, 2, 3].flat_map { |n| [['emit', "dl-#{n}"], ['done', "dl-#{n}"]] }, msgs
    assert_equal MAX_LINE - 10, near&.bytesize
  end

  def test_an_output_over_the_line_limit_fails_its_item_not_the_process
    c = child('map')
    c.hello
    got, ans = c.ask({ 's' => 'z' * MAX_LINE })
    assert_equal [[], 'error', false], [got, ans['type'], ans['retryable']]
    assert_match(/over the 8388608-byte line limit/, ans['message'])
    _, ans = c.ask({ 'still' => 'alive' })
    assert_equal 'done', ans['type']
  end

  def test_an_envelopes_answers_go_out_while_a_later_item_still_works
    c = child('map')
    c.hello
    Dir.mktmpdir do |d|
      gate = File.join(d, 'gate')
      slow = c.item({ 'do' => 'slow' })
      blocked = c.item({ 'do' => 'gate', 'path' => gate })
      c.send_batch(slow, blocked)
      _, ans = c.answer # would hang if answers waited for the whole envelope
      assert_equal ['done', slow['delivery']], [ans['type'], ans['delivery']]
      File.write(gate, '')
      _, ans = c.answer
      assert_equal ['done', blocked['delivery']], [ans['type'], ans['delivery']]
    end
  end

  def test_batch_handler_gets_an_envelope_without_the_linger
    c = child('batch', '4', '30') # a linger no test waits for
    c.hello
    items = Array.new(10) { |i| c.item({ 'i' => i }) }
    c.send_batch(*items)
    sizes = items.map do |it|
      got, ans = c.answer
      assert_equal ['done', it['delivery']], [ans['type'], ans['delivery']]
      got.find { |x| x['type'] == 'emit' }['payload']['n']
    end
    assert_equal [4] * 8 + [2] * 2, sizes
  end

  def test_key_base64_is_decoded_and_kept
    c = child('map')
    c.hello
    got, ans = c.ask({ 'do' => 'key' }, key: nil, keyBase64: '/wA=',
                                          headers: [{ 'key' => 'b', 'valueBase64' => '/g==' }, { 'key' => 't', 'value' => 'v' }, { 'key' => 'n' }])
    assert_equal 'done', ans['type']
    assert_equal '/wA=', got[0]['keyBase64']
    refute got[0].key?('key')
    assert_equal({ 'key' => 'ff00', 'headers' => [%w[b fe], %w[t v], ['n', nil]], 'id' => 't/0/1', 'attempt' => 1, 'idempotencyKey' => 'ik1' },
                 got[0]['payload'])
  end

  def test_map_keyed_keys_outlets_headers
    c = child('keyed')
    c.hello
    got, ans = c.ask({ 'x' => 1 }, key: 'item-key')
    assert_equal({ 'type' => 'done', 'delivery' => 'dl-1' }, ans)
    assert_equal 3, got.length
    assert_equal 'a', got[0]['key']
    assert_equal '/wA=', got[1]['keyBase64']
    assert_equal 'other', got[1]['outlet']
    assert_equal [{ 'key' => 'h', 'valueBase64' => '/g==' }, { 'key' => 't', 'value' => 'v' }, { 'key' => 'n' }], got[1]['headers']
    assert_equal 'item-key', got[2]['key']
    got, ans = c.ask({ 'do' => 'none' })
    assert_equal [[], 'done'], [got, ans['type']]
  end

  def test_abstain_retryable_and_exceptions_fail_the_item_not_the_process
    c = child('map')
    c.hello
    _, ans = c.ask({ 'do' => 'abstain' })
    assert_equal({ 'type' => 'abstain', 'delivery' => 'dl-1', 'reason' => 'unsure' }, ans)
    _, ans = c.ask({ 'do' => 'retry' })
    assert_equal ['error', true], [ans['type'], ans['retryable']]
    assert_match(/try again/, ans['message'])
    _, ans = c.ask({ 'do' => 'raise' })
    assert_equal ['error', false], [ans['type'], ans['retryable']]
    assert_match(/ArgumentError: boom \(action\.rb:\d+/, ans['message'])
    got, ans = c.ask({ 'do' => 'nan' })
    assert_equal [[], 'error'], [got, ans['type']]
    got, ans = c.ask({ 'still' => 'alive' })
    assert_equal ['done', { 'still' => 'alive' }], [ans['type'], got[0]['payload']]
    assert_equal 0, c.shutdown[0]
    assert_match(/action\.rb:\d+:in `handle'/, c.stderr_text)
    c.stderr_text.each_line { |l| JSON.parse(l) }
  end

  def test_metric_with_labels_before_the_answer
    c = child('map')
    c.hello
    got, = c.ask({ 'do' => 'metric' })
    assert_equal({ 'type' => 'metric', 'delivery' => 'dl-1', 'name' => 'm', 'value' => 2.5, 'labels' => { 'l' => 'v' } }, got[0])
    assert_equal 'emit', got[1]['type']
  end

  def test_log_and_stray_puts_go_to_stderr
    c = child('map')
    c.hello
    c.ask({ 'do' => 'log' })
    got, = c.ask({ 'do' => 'print' })
    assert_equal ['emit'], got.map { |m| m['type'] }
    assert_equal [0, ''], c.shutdown
    recs = c.stderr_text.lines.map { |l| JSON.parse(l) }
    assert_equal [
      { 'level' => 'INFO', 'msg' => 'hello log', 'delivery' => 'dl-1', 'item' => 't/0/1', 'attempt' => 1, 'n' => 1 },
      { 'level' => 'INFO', 'msg' => 'stray print', 'stream' => 'stdout', 'delivery' => 'dl-2', 'item' => 't/0/2', 'attempt' => 1 }
    ], recs
  end

  def test_a_puts_is_tagged_with_the_item_that_printed_it
    c = child('map')
    c.hello
    items = [c.item({ 'n' => 1 }), c.item({ 'do' => 'print' }), c.item({ 'do' => 'print' }, attempt: 3)]
    c.send_batch(*items)
    items.each { c.answer }
    assert_equal 0, c.shutdown[0]
    recs = c.stderr_text.lines.map { |l| JSON.parse(l) }
    assert_equal [['stray print', 'dl-2', 't/0/2', 1], ['stray print', 'dl-3', 't/0/3', 3]],
                 recs.map { |r| r.values_at('msg', 'delivery', 'item', 'attempt') }
  end

  def test_workdir
    Dir.mktmpdir do |wd|
      c = child('map', env: { 'MILLSTREAM_WORKDIR' => wd })
      c.hello
      got, = c.ask({ 'do' => 'workdir' })
      assert_equal({ 'workdir' => wd, 'exists' => true }, got[0]['payload'])
    end
  end

  def test_workdir_outside_the_engine_is_removed_at_exit
    c = child('map')
    c.hello
    got, = c.ask({ 'do' => 'workdir' })
    assert got[0]['payload']['exists']
    assert_equal 0, c.shutdown[0]
    refute File.exist?(got[0]['payload']['workdir'])
  end

  def test_config_typed
    c = child('map')
    c.hello({ 'min-rooms' => 3, 'greeting' => 'hey', 'ratio' => 1 })
    got, = c.ask({ 'do' => 'config' })
    assert_equal({ 'min_rooms' => 3, 'greeting' => 'hey', 'ratio' => 1.0 }, got[0]['payload'])
    c = child('map')
    c.hello({})
    got, = c.ask({ 'do' => 'config' })
    assert_equal({ 'min_rooms' => 2, 'greeting' => 'hi', 'ratio' => 0.5 }, got[0]['payload'])
  end

  def test_bad_config_fails_each_item
    c = child('map')
    assert_equal 'ready', c.hello({ 'min-rooms' => 'not-a-number', 'greeting' => 12_345 })['type']
    2.times do
      got, ans = c.ask({ 'do' => 'config' })
      assert_equal [[], 'error', false], [got, ans['type'], ans['retryable']]
      assert_match(/min-rooms/, ans['message'])
      assert_match(/greeting/, ans['message'])
    end
    assert_equal 0, c.shutdown[0]
    assert_match(/bad config/, c.stderr_text)
  end

  def test_unknown_keys_and_types_are_ignored
    c = child('map')
    assert_equal 'ready', c.hello({}, lessons: [{ 'x' => 1 }])['type']
    c.send_msgs({ 'type' => 'future-thing', 'x' => 1 })
    got, ans = c.ask({ 'a' => 1 }, artifacts: [], extra: { 'n' => [1] })
    assert_equal ['done', { 'a' => 1 }], [ans['type'], got[0]['payload']]
  end

  def test_window_written_ahead_answered_in_order
    c = child('map')
    c.hello
    items = (0...64).map { |i| c.item({ 'i' => i, 'pad' => 'x' * 5000 }) }
    c.send_msgs(*items)
    items.each do |it|
      got, ans = c.answer
      assert_equal it['delivery'], ans['delivery']
      assert_equal it['payload']['i'], got[0]['payload']['i']
    end
  end

  def test_answers_go_out_while_a_later_item_still_works
    c = child('map')
    c.hello
    Dir.mktmpdir do |d|
      gate = File.join(d, 'gate')
      slow = c.item({ 'do' => 'slow' })
      blocked = c.item({ 'do' => 'gate', 'path' => gate })
      c.send_msgs(slow, blocked)
      _, ans = c.answer # would hang if answers waited for the whole run
      assert_equal ['done', slow['delivery']], [ans['type'], ans['delivery']]
      File.write(gate, '')
      _, ans = c.answer
      assert_equal ['done', blocked['delivery']], [ans['type'], ans['delivery']]
    end
  end

  def test_large_line_across_reads
    c = child('map')
    c.hello
    big = 'é' * (3 << 20)
    got, = c.ask({ 'big' => big })
    assert_equal big, got[0]['payload']['big']
  end

  def test_batch_gets_what_was_written_ahead
    c = child('batch', '8', '0.2')
    assert_equal({ 'type' => 'ready', 'window' => 64, 'batch' => true }, c.hello)
    items = (0...10).map { |i| c.item({ 'i' => i }) }
    items[2]['payload'] = { 'do' => 'raise' }
    items[3]['payload'] = { 'do' => 'abstain' }
    c.send_msgs(*items)
    sizes = []
    items.each_with_index do |it, n|
      got, ans = c.answer
      assert_equal it['delivery'], ans['delivery']
      case n
      when 2
        assert_equal ['error', false], [ans['type'], ans['retryable']]
        assert_match(/ArgumentError: bad item/, ans['message'])
      when 3
        assert_equal({ 'type' => 'abstain', 'delivery' => it['delivery'], 'reason' => 'not this one' }, ans)
      else
        assert_equal 'done', ans['type']
        emits = got.select { |m| m['type'] == 'emit' }
        assert_equal 1, emits.length
        sizes << emits[0]['payload']['n']
      end
    end
    assert_equal [8] * 6 + [2, 2], sizes
  end

  def test_batch_linger_runs_a_partial_batch
    c = child('batch', '64', '0.05')
    c.hello
    c.send_msgs(c.item({ 'i' => 0 }), c.item({ 'i' => 1 }))
    got, ans = c.answer
    assert_equal %w[metric metric emit], got.map { |m| m['type'] }
    assert_equal ['done', { 'n' => 2, 'i' => 0 }, 'dl-2'], [ans['type'], got[2]['payload'], got[1]['delivery']]
  end

  def test_batch_handler_raising_fails_every_item
    c = child('batch', '4', '0.05')
    c.hello
    items = [c.item({ 'i' => 0 }), c.item({ 'do' => 'boom-all' })]
    c.send_msgs(*items)
    items.each do |it|
      got, ans = c.answer
      assert_equal [[], 'error', it['delivery']], [got, ans['type'], ans['delivery']]
      assert_match(/RuntimeError: the whole batch/, ans['message'])
    end
    assert_equal 0, c.shutdown[0]
    assert_match(/action\.rb:\d+/, c.stderr_text)
  end

  def test_batch_wrong_result_count_fails_the_batch
    c = child('batch-short')
    c.hello
    items = (0...4).map { |i| c.item({ 'i' => i }) }
    c.send_msgs(*items)
    items.each do |it|
      _, ans = c.answer
      assert_equal ['error', it['delivery']], [ans['type'], ans['delivery']]
      assert_match(/returned 3 results for 4 items/, ans['message'])
    end
  end

  def test_shutdown_answers_a_pending_batch_first
    c = child('batch', '64', '5')
    c.hello
    c.send_msgs(c.item({ 'i' => 0 }), { 'type' => 'shutdown' })
    _, ans = c.answer
    assert_equal 'done', ans['type']
    assert_equal 0, c.exit_code
  end

  def test_end_of_stdin_answers_a_pending_batch_first
    c = child('batch', '64', '5')
    c.hello
    c.send_msgs(c.item({ 'i' => 0 }))
    c.close_stdin
    _, ans = c.answer
    assert_equal 'done', ans['type']
    assert_equal 0, c.exit_code
  end

  # -- state per key

  STATEFUL = { 'events' => { 'ttl' => '720h0m0s', 'maxBytes' => 64 } }.freeze

  def test_ready_declares_state_only_when_hello_names_a_stateful_inlet
    assert_equal({ 'type' => 'ready', 'window' => 64, 'batch' => true, 'state' => true }, child('map').hello(state: STATEFUL))
    assert_equal({ 'type' => 'ready', 'window' => 64, 'batch' => true }, child('map').hello(state: {}))
  end

  def test_state_is_read_and_written_before_done_in_the_fast_shape
    c = child('map')
    c.hello(state: STATEFUL)
    c.send_msgs(c.item({ 'do' => 'count' }, key: 'u-7', inlet: 'events', state: { 'n' => 4 }))
    assert_equal '{"type":"emit","delivery":"dl-1","key":"u-7","payload":{"n":5,"was":{"n":4}}}', c.raw_line
    assert_equal '{"type":"state","delivery":"dl-1","state":{"n":5}}', c.raw_line
    assert_equal '{"type":"done","delivery":"dl-1"}', c.raw_line
    got, ans = c.ask({ 'do' => 'count' }, inlet: 'events') # no state: a first record
    assert_equal [%w[emit state], { 'n' => 1, 'was' => nil }, { 'n' => 1 }, 'done'],
                 [got.map { |m| m['type'] }, got[0]['payload'], got[1]['state'], ans['type']]
    got, ans = c.ask({ 'x' => 1 }, inlet: 'events', state: { 'n' => 1 }) # not set: left alone
    assert_equal [%w[emit], 'done'], [got.map { |m| m['type'] }, ans['type']]
  end

  def test_clear_state_writes_null_and_the_last_assignment_wins
    c = child('map')
    c.hello(state: STATEFUL)
    got, ans = c.ask({ 'do' => 'clear' }, inlet: 'events', state: 's')
    assert_equal [{ 'was' => 's' }, { 'type' => 'state', 'delivery' => 'dl-1', 'state' => nil }, 'done'], [got[0]['payload'], got[1], ans['type']]
    got, ans = c.ask({ 'do' => 'set-state', 'state' => nil }, inlet: 'events')
    assert_equal [nil, 'done'], [got[1]['state'], ans['type']]
  end

  def test_a_failing_handler_stages_nothing
    c = child('map')
    c.hello(state: STATEFUL)
    got, ans = c.ask({ 'do' => 'count-raise' }, inlet: 'events', state: { 'n' => 1 })
    assert_equal [[], 'error', false], [got, ans['type'], ans['retryable']]
    assert_includes ans['message'], 'failed after staging'
  end

  def test_a_refused_state_fails_the_item_with_the_engines_words_even_if_rescued
    c = child('map')
    c.hello(state: STATEFUL)
    cases = [
      [{ key: nil, inlet: 'events', id: 'events/0/17' }, { 'n' => 1 },
       'item events/0/17 has no key, so it has no state: a state message is only for keyed records ' \
       '(route keyless ones elsewhere, or stage no state for them)'],
      [{ inlet: 'audit' }, { 'n' => 1 }, 'inlet audit keeps no state: add --state audit to the action line, or stage no state for its items'],
      [{ key: 'u-7', inlet: 'events' }, 'x' * 63,
       'the state staged for key "u-7" is 65 bytes, over max-bytes 64 bytes (--state events,max-bytes=…): ' \
       'keep less per key, or raise max-bytes (at most 1 MiB)'],
    ]
    cases.each do |fields, state, want|
      [false, true].each do |ignore|
        got, ans = c.ask({ 'do' => 'set-state', 'state' => state, 'ignore' => ignore }, **fields)
        assert_equal({ 'type' => 'error', 'delivery' => ans['delivery'], 'message' => want, 'retryable' => false }, ans)
        refute_includes got.map { |m| m['type'] }, 'state' # emits, if any, the engine drops
      end
    end
    got, ans = c.ask({ 'do' => 'set-state', 'state' => 'x' * 62 }, inlet: 'events') # 64 bytes: at the limit
    assert_equal ['x' * 62, 'done'], [got[1]['state'], ans['type']]
    _, ans = c.ask({ 'do' => 'set-state', 'state' => 'x' * 63 }, key: nil, keyBase64: '/w==', inlet: 'events')
    assert_includes ans['message'], 'key "/w==" is 65 bytes'
  end

  def test_without_state_in_hello_every_inlet_keeps_none
    c = child('map')
    c.hello
    _, ans = c.ask({ 'do' => 'count' }, inlet: 'events')
    assert_equal 'inlet events keeps no state: add --state events to the action line, or stage no state for its items', ans['message']
  end

  def test_a_batch_handler_stages_each_items_state_in_the_envelope
    c = child('batch', '8', '5')
    c.hello(state: { 'events' => { 'maxBytes' => 65_536 } })
    c.send_batch(c.item({ 'do' => 'count' }, key: 'a', inlet: 'events', state: { 'n' => 1 }),
                 c.item({ 'do' => 'raise' }, key: 'b', inlet: 'events'),
                 c.item({ 'do' => 'count' }, key: 'c', inlet: 'events'))
    msgs = Array.new(7) { c.read }
    assert_equal ['line', ['batch', 7]], c.frames
    assert_equal [%w[emit dl-1], %w[state dl-1], %w[done dl-1], %w[error dl-2], %w[emit dl-3], %w[state dl-3], %w[done dl-3]],
                 msgs.map { |m| [m['type'], m['delivery']] }
    assert_equal [{ 'n' => 2 }, { 'n' => 1 }], [msgs[1]['state'], msgs[5]['state']]
  end
end
