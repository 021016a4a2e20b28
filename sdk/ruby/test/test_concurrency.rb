# frozen_string_literal: true

# Tests of concurrency: N (handler calls on threads) over real pipes. A call that must wait
# waits on a file the test (or another call) creates: no test depends on timing.
require 'minitest/autorun'
require 'json'
require 'tmpdir'

require_relative 'child'

class TestConcurrency < Minitest::Test
  def child(*args, **kw)
    c = Child.new(*args, **kw)
    (@children ||= []) << c
    c
  end

  def setup
    @dir = Dir.mktmpdir('millrace-conc-')
  end

  def teardown
    (@children || []).each(&:kill)
    FileUtils.rm_rf(@dir)
  end

  def path(name) = File.join(@dir, name)

  def test_ready_declares_concurrent_and_cancel_with_the_window
    assert_equal({ 'type' => 'ready', 'window' => 8, 'batch' => true, 'concurrent' => true, 'cancel' => true }, child('map-concurrent').hello)
    assert_equal({ 'type' => 'ready', 'window' => 128, 'batch' => true, 'concurrent' => true, 'cancel' => true, 'state' => true },
                 child('map-concurrent', '128').hello(state: { 'events' => { 'maxBytes' => 64 } }))
    assert_equal({ 'type' => 'ready', 'window' => 64, 'batch' => true }, child('map-concurrent', '1').hello) # one at a time: as ever
  end

  # A call waits on a gate that only a later call opens: one at a time, this would never end.
  def test_calls_run_at_once_and_are_answered_as_they_return
    c = child('map-concurrent')
    c.hello
    waiting = c.item({ 'do' => 'gate', 'path' => path('g') })
    opener = c.item({ 'do' => 'touch', 'path' => path('g') }, key: 'other')
    c.send_batch(waiting, opener)
    got = Array.new(2) { c.answer[1].values_at('delivery', 'type') } # in either order
    assert_equal [[waiting['delivery'], 'done'], [opener['delivery'], 'done']].sort, got.sort
    assert_equal [0, ''], c.shutdown
  end

  def test_many_calls_keep_their_own_outputs_state_and_metrics
    c = child('map-concurrent', '16')
    c.hello(state: { 'events' => { 'maxBytes' => 1024 } })
    items = Array.new(200) { |i| c.item({ 'do' => i.even? ? 'count' : 'metric', 'i' => i }, key: "k#{i}", inlet: 'events', state: { 'n' => i }) }
    items.each_slice(50) { |s| c.send_batch(*s) }
    seen = {}
    200.times do
      got, ans = c.answer
      assert_equal 'done', ans['type']
      seen[ans['delivery']] = got
    end
    items.each_with_index do |it, i|
      got = seen.fetch(it['delivery'])
      assert(got.all? { |m| m['delivery'] == it['delivery'] })
      if i.even?
        assert_equal [{ 'n' => i + 1, 'was' => { 'n' => i } }, "k#{i}", { 'n' => i + 1 }], [got[0]['payload'], got[0]['key'], got[1]['state']]
      else
        assert_equal %w[metric emit], got.map { |m| m['type'] }
      end
    end
  end

  def test_a_cancel_answers_at_once_and_the_others_go_on
    c = child('map-concurrent')
    c.hello
    hung = c.item({ 'do' => 'hang', 'path' => path('hanging') })
    waiting = c.item({ 'do' => 'gate', 'path' => path('g') }, key: 'b')
    c.send_msgs(hung, waiting)
    Timeout.timeout(WAIT) { sleep 0.01 until File.exist?(path('hanging')) } # its handler at work
    c.send_msgs({ 'type' => 'cancel', 'delivery' => hung['delivery'] }, { 'type' => 'cancel', 'delivery' => 'nobody' })
    got, ans = c.answer
    assert_equal [[], { 'type' => 'error', 'delivery' => hung['delivery'], 'retryable' => true,
                        'message' => "cancelled: the engine cancelled delivery #{hung['delivery']} (its timeout passed); what its handler returns is dropped" }], [got, ans]
    File.write(path('g'), '')
    assert_equal [waiting['delivery'], 'done'], c.answer[1].values_at('delivery', 'type')
    c.send_msgs({ 'type' => 'cancel', 'delivery' => waiting['delivery'] }) # answered already: ignored
    _, ans = c.ask({ 'n' => 1 })
    assert_equal 'done', ans['type']
    assert_equal [0, ''], c.shutdown # the hung call ended by Cancelled, its thread silent
    refute_match(/terminated with exception/, c.stderr_text)
    cleanup = c.stderr_text.lines.map { |l| JSON.parse(l) }.find { |r| r['msg'].start_with?('cleaning up') }
    assert_equal hung['delivery'], cleanup['delivery'] # its ensure ran, its print tagged with its delivery
  end

  def test_prints_of_calls_at_once_are_tagged_with_their_own_delivery
    c = child('map-concurrent')
    c.hello
    a = c.item({ 'do' => 'gate-print', 'path' => path('a') }, key: 'a')
    b = c.item({ 'do' => 'gate-print', 'path' => path('b') }, key: 'b')
    c.send_batch(a, b)
    File.write(path('b'), '')
    assert_equal b['delivery'], c.answer[1]['delivery']
    File.write(path('a'), '')
    assert_equal a['delivery'], c.answer[1]['delivery']
    c.shutdown
    recs = c.stderr_text.lines.map { |l| JSON.parse(l) }.select { |r| r['stream'] == 'stdout' }
    assert_equal 4, recs.length
    recs.each { |r| assert_equal r['msg'].split(' ').last, r['delivery'], r.inspect }
  end

  # A batch's item cancelled: answered at once; the batch goes on, the rest answered by it.
  def test_a_cancel_in_a_concurrent_batch_drops_only_that_item
    c = child('batch-concurrent')
    c.hello
    waiting = c.item({ 'do' => 'gate', 'path' => path('g') })
    other = c.item({ 'n' => 2 }, key: 'b')
    c.send_batch(waiting, other)
    later = [c.item({ 'do' => 'touch', 'path' => path('g') }, key: 'c'), c.item({ 'n' => 4 }, key: 'd')]
    c.send_batch(*later) # a second batch at once opens the first's gate
    answered = Array.new(4) { c.answer.then { |got, ans| [ans['delivery'], ans['type'], got.length] } }
    assert_equal [waiting, other, *later].map { |i| [i['delivery'], 'done', 1] }.sort, answered.sort
    c2 = child('batch-concurrent')
    c2.hello
    w2 = c2.item({ 'do' => 'gate', 'path' => path('h') })
    o2 = c2.item({ 'n' => 3 }, key: 'b')
    c2.send_batch(w2, o2)
    c2.send_msgs({ 'type' => 'cancel', 'delivery' => w2['delivery'] })
    assert_equal [w2['delivery'], 'error', true], c2.answer[1].values_at('delivery', 'type', 'retryable')
    File.write(path('h'), '')
    got, ans = c2.answer
    assert_equal [o2['delivery'], 'done', { 'n' => 3 }], [ans['delivery'], ans['type'], got[0]['payload']]
    assert_equal [0, ''], c2.shutdown # nothing more for the cancelled item
  end

  def test_concurrency_must_be_a_count
    require_relative '../lib/millrace'
    [0, -1, 2.5, nil].each do |bad|
      e = assert_raises(ArgumentError) { Millrace::Session.new(:map, ->(*) {}, concurrency: bad) }
      assert_match(/concurrency must be an Integer of at least 1/, e.message)
    end
  end
end
