# frozen_string_literal: true

# Tests of the Ruby SDK over real pipes: each test starts testdata/action.rb as a child and
# speaks the action protocol to it. Run: ruby test/test_millrace.rb (in sdk/ruby).
require 'minitest/autorun'
require 'json'
require 'open3'
require 'timeout'
require 'tmpdir'

ACTION = File.expand_path('../testdata/action.rb', __dir__)
WAIT = 10 # seconds for any one line: a bound on a hang, not a speed target

class Child
  attr_reader :stderr_text

  def initialize(*args, env: {})
    @in, @out, @err, @wait = Open3.popen3({ 'MILLSTREAM_WORKDIR' => nil }.merge(env), RbConfig.ruby, ACTION, *args)
    @stderr_text = +''
    @err_reader = Thread.new { @stderr_text << @err.read }
    # stdout is read on its own thread, so a child answering a large write never blocks on a
    # full pipe while the test is still writing
    @lines = Queue.new
    @out_reader = Thread.new do
      while (l = @out.gets)
        @lines << l
      end
      @lines << nil
    end
    @seq = 0
  end

  def send_msgs(*msgs)
    @in.write(msgs.map { |m| JSON.generate(m) + "\n" }.join)
    @in.flush
  end

  def raw_line
    line = Timeout.timeout(WAIT) { @lines.pop }
    raise "stdout ended; stderr: #{@err_reader.join(WAIT) && @stderr_text}" if line.nil?
    raise "a line without newline: #{line.inspect}" unless line.end_with?("\n")

    line.chomp.force_encoding(Encoding::UTF_8)
  end

  def read = JSON.parse(raw_line)

  def hello(config = {}, **extra)
    send_msgs({ 'type' => 'hello', 'protocol' => 1, 'action' => 't', 'config' => config, 'vars' => { 'v' => 1 } }.merge(extra.transform_keys(&:to_s)))
    read
  end

  def item(payload, key: 'k', **fields)
    @seq += 1
    it = { 'type' => 'item', 'delivery' => "dl-#{@seq}", 'id' => "t/0/#{@seq}", 'payload' => payload, 'partition' => 0,
           'offset' => @seq, 'timestamp' => 0, 'attempt' => 1, 'idempotencyKey' => "ik#{@seq}" }
    it['key'] = key unless key.nil?
    it.merge(fields.transform_keys(&:to_s))
  end

  def answer
    got = []
    loop do
      m = read
      return [got, m] if %w[done error abstain].include?(m['type'])

      got << m
    end
  end

  def ask(payload, **kw)
    it = item(payload, **kw)
    send_msgs(it)
    got, ans = answer
    raise "answer for #{ans['delivery']}, not #{it['delivery']}" unless ans['delivery'] == it['delivery']

    [got, ans]
  end

  def close_stdin = @in.close

  def exit_code
    Timeout.timeout(WAIT) { @wait.value }.exitstatus
  end

  def shutdown
    send_msgs({ 'type' => 'shutdown' })
    code = exit_code
    @err_reader.join(WAIT)
    @out_reader.join(WAIT)
    [code, drain]
  end

  # What is left on stdout once it ended.
  def drain
    rest = +''
    while (l = @lines.pop)
      rest << l
    end
    rest
  end

  def kill
    Process.kill('KILL', @wait.pid) if @wait.alive?
  rescue Errno::ESRCH
    nil
  end
end

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
    assert_equal({ 'type' => 'ready', 'window' => 64 }, c.hello)
    assert_equal [0, ''], c.shutdown
  end

  def test_end_of_stdin_exits_0
    c = child('map')
    c.hello
    c.close_stdin
    assert_equal 0, c.exit_code
  end

  def test_map_keeps_key_and_writes_the_fast_shape
    c = child('map')
    c.hello
    c.send_msgs(c.item({ 'a' => 1, 't' => 'é' }, key: 'k1'))
    assert_equal '{"type":"emit","delivery":"dl-1","key":"k1","payload":{"a":1,"t":"é"}}', c.raw_line
    assert_equal({ 'type' => 'done', 'delivery' => 'dl-1' }, c.read)
    got, = c.ask({ 'a' => 2 }, key: nil)
    refute got[0].key?('key')
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
    lines = c.stderr_text.lines.map(&:chomp)
    rec = JSON.parse(lines[0])
    assert_equal ['INFO', 'hello log', 1, 'dl-1', 't/0/1', 1], rec.values_at('level', 'msg', 'n', 'delivery', 'item', 'attempt')
    assert_includes lines, 'stray print'
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
    assert_equal({ 'type' => 'ready', 'window' => 64 }, c.hello)
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
end
