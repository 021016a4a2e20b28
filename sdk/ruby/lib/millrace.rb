# frozen_string_literal: true

# millrace: write a Millstream action in Ruby (standard library only, one file).
#
# An action reads items on stdin and answers on stdout, one JSON line each (docs/protocol.md).
# This module speaks that protocol for you, so an action is one call:
#
#   require 'millrace'
#   Millrace.map do |payload, item|
#     raise Millrace::Abstain, 'no surface area' unless payload['surface']
#     item.metric('rooms', payload['rooms'], { 'city' => payload['city'] || '?' })
#     { 'id' => payload['id'], 'score' => 3 * payload['rooms'] }
#   end
#
# - Millrace.map { |payload, item| value }: one output per item, with the item's key.
# - Millrace.map_keyed { |payload, item| [value or Millrace::Output, ...] }: zero or more
#   outputs, each a plain value (the item's key) or Output.new(value, key:, outlet:, headers:).
# - Millrace.batch(size: 64, linger: 0.005) { |items| [result, ...] }: the items the engine
#   wrote ahead (up to size, or what arrived within linger seconds), one result per item, in
#   order: a value (one output; keyed: true, an array of outputs) or an exception instance,
#   which fails that item alone.
# - raise Millrace::Abstain, reason: hand the item to the step's fallback. raise
#   Millrace::Retryable, msg: fail the attempt, to be retried with backoff. Any other exception
#   fails the item for good, its backtrace logged to stderr; the process keeps serving.
# - item.metric(name, value, labels), item.log / Millrace.log (JSON lines on stderr),
#   item.config (the config of hello, checked against config:, a schema such as
#   { min_rooms: Integer, greeting: [String, 'hi'] } giving a Struct, or a callable that
#   validates the raw Hash), Millrace.workdir (MILLSTREAM_WORKDIR).
# - State per key (docs/protocol.md, "State per key"): item.state is the key's state (nil when
#   it has none); item.state = value stages a new one, item.clear_state (or item.state = nil)
#   its deletion; the last assignment wins. It is written only when the handler returns
#   normally, before the item's answer. A state the engine would refuse (a keyless item, an
#   inlet hello does not name as stateful, over its maxBytes) raises Millrace::StateError and
#   fails the item with the engine's words, even if rescued. "state": true is declared in ready
#   when hello names an inlet that keeps state.
#
# A handler that waits on a call (HTTP, a database, a model server) runs many deliveries at once
# with concurrency: N, each on a thread of its own, answered as it returns:
#
#   Millrace.map(concurrency: 128) do |payload, item|
#     Net::HTTP.get_response(URI("https://api.example/#{payload['id']}")).body
#   end
#
# - concurrency: N (map, map_keyed, batch): up to N handler calls at once (batch: up to N
#   batches), declared with a window of N (batch: at least size) and "concurrent" and "cancel"
#   in ready. 128 covers a sidecar batch of 100 records in one wave of calls. The engine never
#   has two deliveries of one key in flight, so the calls at once are of different keys. When
#   the engine cancels a delivery (its --timeout passed), the SDK answers a retryable error at
#   once and raises Millrace::Cancelled in the handler's thread (a batch's other items go on:
#   only that item's result is dropped); whatever the handler returns after is dropped.
#   Millrace::Cancelled is not a StandardError, so `rescue => e` does not swallow it. puts and
#   item.log are tagged with each call's own delivery.
#
# The SDK declares a window of 64 deliveries and batch envelopes in ready, reads stdin in chunks
# and writes the answers of a run of items in one write: those to the items of an envelope as
# one {"type":"batch",...} line. puts and anything else written to $stdout go to stderr, as JSON
# log lines tagged with the item whose handler wrote them: stdout carries protocol lines only.
# shutdown or the end of stdin exits with status 0.

require 'json'
require 'base64'
require 'tmpdir'
require 'fileutils'
require 'stringio'

module Millrace
  VERSION = '0.1.0'
  # Deliveries the SDK accepts written ahead, declared in its ready line.
  WINDOW = 64
  READ_SIZE = 1 << 16
  FLUSH_AFTER = 0.05 # seconds: answers of a slow run still go out this often
  MAX_LINE = 8 << 20 # bytes in one protocol line, newline excluded (stdio.MaxLineBytes)
  ENV_HEAD = '{"type":"batch","messages":['
  ENV_TAIL = ']}'
  # Writes a String as a JSON string as JSON.generate does, at a third of its cost (it builds a
  # State per call). Strings only: they leave no nesting depth behind in it when they fail.
  STRING_JSON = JSON::State.new

  # Raise to answer the delivery with abstain: the engine routes the item to the fallback.
  class Abstain < StandardError
    def reason
      message
    end
  end

  # Raise to fail this attempt with a retryable error: the engine retries with backoff.
  class Retryable < StandardError; end

  # Raised in a handler's thread when the engine cancels its delivery (with concurrency:). An
  # Exception, not a StandardError, as Timeout's, so a handler's `rescue => e` lets it pass.
  class Cancelled < Exception; end # rubocop:disable Lint/InheritException

  # The concurrency a handler that waits on a call is best given: it covers a sidecar batch
  # (100 records) in one wave of calls, where 64 would take two (docs/protocol.md).
  CONCURRENT_WINDOW = 128

  # The config of hello does not fit the declared schema; every item fails with it.
  class ConfigError < StandardError; end

  # A state the engine would refuse: the item fails with this message, even if rescued.
  class StateError < StandardError; end

  MAX_STATE = 1 << 20 # the most any inlet's max-bytes may be (engine.MaxStateBytes)

  # A limit as the engine names it: 64 KiB, 1 MiB, or a count of bytes.
  def self.size_text(n)
    return "#{n >> 10} KiB" if n % (1 << 20) != 0 && (n % (1 << 10)).zero?
    return "#{n >> 20} MiB" if (n % (1 << 20)).zero?

    "#{n} bytes"
  end

  # The boolean type of a config schema.
  Boolean = :boolean

  # One output of map_keyed or a keyed batch. key nil keeps the item's key; a String sets it
  # (one that is not valid UTF-8 travels as keyBase64). headers: [[key, value]] or a Hash.
  Output = Struct.new(:value, :key, :outlet, :headers) do
    def initialize(value, key: nil, outlet: nil, headers: nil)
      super(value, key, outlet, headers)
    end
  end

  # Structured logging to stderr: one JSON object per line (level and msg read by the engine).
  class Log
    def initialize(fields = {})
      @fields = fields
    end

    def bind(**fields)
      Log.new(@fields.merge(fields))
    end

    %w[debug info warn error].each do |name|
      level = name.upcase
      define_method(name) { |msg, **fields| write(level, msg, fields) }
    end

    private

    def write(level, msg, fields)
      rec = { 'level' => level, 'msg' => msg.to_s }.merge(@fields).merge(fields)
      line = begin
        JSON.generate(rec)
      rescue StandardError => e
        JSON.generate('level' => level, 'msg' => msg.to_s, 'fields' => e.message)
      end
      $stderr.write(line + "\n")
      $stderr.flush
    end
  end

  @log = Log.new
  @workdir = nil

  class << self
    # The action's logger; item.log adds the delivery, item and attempt.
    attr_reader :log

    # MILLSTREAM_WORKDIR (removed by the engine after the process exits); outside the engine, a
    # temporary folder removed at exit.
    def workdir
      wd = ENV['MILLSTREAM_WORKDIR']
      return wd if wd && !wd.empty?

      unless @workdir
        @workdir = Dir.mktmpdir('millrace-workdir-')
        dir = @workdir
        at_exit { FileUtils.rm_rf(dir) }
      end
      @workdir
    end

    # Serves the block: one output per item, with the item's key. Never returns. concurrency:
    # N runs up to N calls at once, on threads.
    def map(config: nil, window: nil, concurrency: 1, &fn)
      serve(:map, fn, config: config, window: window, concurrency: concurrency)
    end

    # Serves the block: an array of outputs per item.
    def map_keyed(config: nil, window: nil, concurrency: 1, &fn)
      serve(:map_keyed, fn, config: config, window: window, keyed: true, concurrency: concurrency)
    end

    # Serves the block over batches: up to size items, or those that arrived within linger
    # seconds of the first; it returns one result per item. If it raises, every item fails.
    # concurrency: N runs up to N batches at once, on threads.
    def batch(size: WINDOW, linger: 0.005, keyed: false, config: nil, window: nil, concurrency: 1, &fn)
      raise ArgumentError, 'batch size must be at least 1' unless size >= 1

      serve(:batch, fn, config: config, window: window, size: size, linger: linger, keyed: keyed, concurrency: concurrency)
    end

    # Checks the raw config of hello against spec (nil, a callable or a schema Hash).
    def check_config(spec, raw)
      return raw if spec.nil?
      return spec.call(raw) if spec.respond_to?(:call)
      raise ConfigError, "the config is #{JSON.generate(raw)}, not an object" unless raw.is_a?(Hash)

      given = raw.to_h { |k, v| [norm(k), [k, v]] }
      values = {}
      problems = []
      spec.each do |field, entry|
        type, default = entry.is_a?(Array) ? entry : [entry, nil]
        k, v = given[norm(field)]
        if k.nil?
          if entry.is_a?(Array)
            values[field.to_sym] = default
          else
            problems << "#{field}: missing (declare it with --param, or give it a default: [Type, default])"
          end
          next
        end
        ok, v = fit(type, v)
        problems << "#{k}: #{JSON.generate(v)} is not #{type_name(type)}" unless ok
        values[field.to_sym] = v
      end
      raise ConfigError, "the config does not fit: #{problems.join('; ')}" unless problems.empty?

      Struct.new(*values.keys, keyword_init: true).new(**values)
    end

    private

    def norm(name)
      name.to_s.delete('-_').downcase
    end

    def fit(type, v)
      if type == Boolean then [[true, false].include?(v), v]
      elsif type == Integer then [v.is_a?(Integer), v]
      elsif type == Float then [v.is_a?(Numeric), v.is_a?(Numeric) ? v.to_f : v]
      elsif type.is_a?(Class) then [v.is_a?(type), v]
      else [true, v]
      end
    end

    def type_name(type)
      type == Boolean ? 'a boolean' : "a #{type}"
    end

    def serve(kind, fn, **opts)
      raise ArgumentError, "Millrace.#{kind} takes a block" unless fn

      # stdout is the protocol's: puts and other writes to $stdout go to stderr
      out = STDOUT.dup
      out.binmode
      $stdout.flush
      STDOUT.reopen(STDERR)
      STDOUT.sync = true
      session = Session.new(kind, fn, **opts)
      printed = Printed.new(session)
      $stdout = printed
      code = session.serve($stdin, out)
      printed.flush
      $stderr.flush
      exit(code) # at_exit handlers run: the temporary workdir outside the engine is removed
    end
  end

  # One delivery. raw is the item line as decoded, unknown keys included.
  class Item
    attr_reader :raw, :payload, :delivery
    # The staged state's JSON ('null' deletes), and a state the engine would refuse.
    attr_reader :staged_state, :state_error # :nodoc:
    # With concurrency: the messages its handler sent so far (metrics), whether it is
    # answered (or cancelled), whether it came in an envelope, and the thread that runs it.
    attr_accessor :msgs, :answered, :envelope, :thread # :nodoc:

    def initialize(session, raw)
      @s = session
      @raw = raw
      @payload = raw['payload']
      @delivery = raw['delivery'] || ''
      @staged_state = nil
      @state_error = nil
      @msgs = nil
    end

    # The key's state: the JSON value the action last staged for it, nil when none.
    def state = @raw['state']

    # Stages value (any JSON value) as the key's new state; nil deletes it, as clear_state.
    # The last assignment wins; it is written only if the handler returns normally. A state
    # the engine would refuse raises StateError and fails the item even if rescued.
    def state=(value)
      inlet = @raw['inlet'] || ''
      lim = @s.state_inlets[inlet]
      b64 = @raw['keyBase64']
      err = nil
      text = 'null'
      if @raw['key'].nil? && (b64.nil? || b64.empty?)
        err = "item #{id} has no key, so it has no state: a state message is only for keyed records " \
              '(route keyless ones elsewhere, or stage no state for them)'
      elsif !@s.state_inlets.key?(inlet)
        err = "inlet #{inlet} keeps no state: add --state #{inlet} to the action line, or stage no state for its items"
      elsif !value.nil?
        text = JSON.generate(value)
        cap = lim.is_a?(Hash) ? lim['maxBytes'] : nil
        if cap.is_a?(Integer) && cap.positive? && text.bytesize > cap
          key = @raw['key'].nil? ? b64 : @raw['key']
          n = text.bytesize.to_s.reverse.scan(/\d{1,3}/).join(',').reverse
          err = "the state staged for key #{JSON.generate(key)} is #{n} bytes, over max-bytes #{Millrace.size_text(cap)} " \
                "(--state #{inlet},max-bytes=…): keep less per key, or raise max-bytes (at most #{Millrace.size_text(MAX_STATE)})"
        end
      end
      if err
        @state_error = err
        raise StateError, err
      end
      @staged_state = text
    end

    # Stages the deletion of the key's state: its next item has none.
    def clear_state
      self.state = nil
    end

    # A String (binary-encoded when the key is not UTF-8), or nil when absent.
    def key
      Item.text_or_bytes(@raw['key'], @raw['keyBase64'])
    end

    # [[key, value]], value a String or nil.
    def headers
      (@raw['headers'] || []).map { |h| [h['key'] || '', Item.text_or_bytes(h['value'], h['valueBase64'])] }
    end

    def self.text_or_bytes(text, b64)
      return text unless text.nil?
      return Base64.strict_decode64(b64) if b64 && !b64.empty?

      nil
    end

    def id = @raw['id'] || ''
    def attempt = @raw['attempt'] || 1
    def idempotency_key = @raw['idempotencyKey'] || ''
    def topic = @raw['topic'] || ''
    def partition = @raw['partition'] || 0
    def offset = @raw['offset'] || 0
    def timestamp = @raw['timestamp'] || 0
    def inlet = @raw['inlet'] || ''
    def run = @raw['run'] || ''
    def config = @s.config
    def vars = @s.vars
    def workdir = Millrace.workdir

    def log
      @log ||= Millrace.log.bind(delivery: @delivery, item: id, attempt: attempt)
    end

    # Records a custom measurement with this attempt: a finite number, labels of strings.
    def metric(name, value, labels = nil)
      v = Float(value)
      raise ArgumentError, "metric #{name.inspect}: the value must be a finite number, not #{value.inspect}" unless v.finite?

      m = { 'type' => 'metric', 'delivery' => @delivery, 'name' => name.to_s, 'value' => v }
      m['labels'] = labels.to_h { |k, x| [k.to_s, x.to_s] } if labels && !labels.empty?
      (@msgs || @s.out) << JSON.generate(m)
    end
  end

  # $stdout while the SDK serves: each line written becomes a JSON log line on stderr (msg the
  # text, stream "stdout"), with the delivery, item and attempt of the item whose handler wrote
  # it, or none outside a handler of one item. With a window the engine cannot tell which
  # delivery a raw stderr line belongs to; the SDK can.
  class Printed
    def initialize(session)
      @session = session
    end

    # Each thread's partial line is its own: concurrent handlers' prints never mix.
    def buf = (Thread.current[:millrace_printed] ||= +'')

    def write(*args)
      n = 0
      buf = self.buf
      args.each do |a|
        t = a.to_s
        n += t.bytesize
        buf << t
      end
      while (i = buf.index("\n"))
        line = buf[0, i]
        buf.replace(buf[(i + 1)..])
        it = @session.current
        fields = { stream: 'stdout' }
        fields.update(delivery: it.delivery, item: it.id, attempt: it.attempt) if it
        Millrace.log.info(line.scrub, **fields)
      end
      n
    end

    def <<(obj)
      write(obj)
      self
    end

    %i[puts print printf putc].each do |name|
      define_method(name) do |*args|
        s = StringIO.new
        s.send(name, *args)
        write(s.string)
        nil
      end
    end

    def flush
      write("\n") unless buf.empty?
      self
    end

    def sync = true
    def sync=(_value); end
    def tty? = false
    alias isatty tty?
    def fileno = 2 # fd 1 points at stderr too

    # Anything else an IO does is STDERR's (written there as it is, untagged).
    def method_missing(name, *args, &blk)
      STDERR.respond_to?(name) ? STDERR.send(name, *args, &blk) : super
    end

    def respond_to_missing?(name, include_private = false)
      STDERR.respond_to?(name) || super
    end
  end

  # One conversation with the engine.
  class Session
    attr_reader :config, :vars, :out, :state_inlets

    def initialize(kind, fn, config: nil, window: nil, size: 0, linger: 0.0, keyed: false, concurrency: 1)
      raise ArgumentError, "concurrency must be an Integer of at least 1 (1: one at a time), not #{concurrency.inspect}" unless concurrency.is_a?(Integer) && concurrency >= 1
      raise ArgumentError, 'window must be at least 1' unless window.nil? || window >= 1

      @concurrency = concurrency
      window ||= concurrency > 1 ? concurrency : WINDOW
      @kind = kind
      @fn = fn
      @spec = config
      @size = size
      @linger = linger
      @keyed = keyed
      @window = [window, size].max
      @config = nil
      @vars = {}
      @config_error = nil
      @out = [] # answer messages not yet written, each without its newline
      @out_envelope = false # whether they answer items that came in an envelope
      @held = [] # [envelope, messages] to write before @out, in another framing
      @current = nil # the item whose handler runs, for $stdout's lines
      @pending = []
      @pending_since = 0.0
      @hello = false
      @state_inlets = {} # from hello: the inlets that keep state, with their limits
      @last_flush = now
      return unless concurrent?

      @mu = Mutex.new
      @wrote = ConditionVariable.new # answers are waiting for the writer
      @inflight = {} # delivery => Item, held until answered or cancelled
      @calls = {} # the threads of handler calls still running
      @in_envelope = false # the message being read came in an envelope
      @closing = false
    end

    def concurrent? = @concurrency > 1

    # The item whose handler runs on this thread (or, one at a time, the one running), for
    # $stdout's lines.
    def current = Thread.current[:millrace_item] || @current

    def serve(input, output)
      @io = output
      @writer = Thread.new { write_answers } if concurrent?
      rest = +''
      rest.force_encoding(Encoding::BINARY)
      loop do
        if @pending.any?
          wait = @pending_since + @linger - now
          if wait <= 0 || IO.select([input], nil, nil, wait).nil?
            run_batch # nothing more within the linger: run what is here
            flush
            next
          end
        end
        chunk = begin
          input.readpartial(READ_SIZE)
        rescue EOFError
          nil
        end
        if chunk.nil?
          run_batch if @pending.any?
          finish_calls
          flush
          return 0
        end
        @last_flush = now if @out.empty? # the 50 ms count from the first answer's work
        rest << chunk
        next unless chunk.include?("\n")

        lines = rest.split("\n", -1)
        rest = lines.pop
        lines.each do |line|
          next if line.strip.empty?
          next if on_line(line.force_encoding(Encoding::UTF_8))

          finish_calls
          flush
          return 0
        end
        flush
      end
    rescue Errno::EPIPE
      0 # the engine is gone
    rescue Interrupt
      130
    end

    private

    def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    def flush
      @last_flush = now
      return @mu.synchronize { @wrote.signal } if concurrent? && !@closing
      return if @out.empty? && @held.empty?

      @io.write(take)
      @io.flush
    end

    # The text of the answers not yet written, which are then no longer held.
    def take
      data = @out.empty? ? +'' : Session.frame(@out, @out_envelope)
      unless @held.empty?
        data = @held.map { |e, m| Session.frame(m, e) }.join << data
        @held = []
      end
      @out = []
      data
    end

    # Answers take the framing of what they answer: the answers to an envelope's items go in an
    # envelope, those to an item on a line on lines, so an engine (or a tool) that writes no
    # envelopes reads none back.
    def frame_as(envelope)
      return if envelope == @out_envelope

      unless @out.empty?
        @held << [@out_envelope, @out]
        @out = []
      end
      @out_envelope = envelope
    end

    public

    # The text that carries msgs (answer messages, each without its newline): one line when
    # there is one (or when not envelope: a line each), else one batch envelope; several, when
    # one envelope would pass the line limit (an answer that fits a line alone but not an
    # envelope with others goes on its own).
    def self.frame(msgs, envelope = true)
      return msgs.join("\n") << "\n" unless envelope
      return msgs[0] + "\n" if msgs.length == 1

      text = ENV_HEAD + msgs.join(',') << ENV_TAIL << "\n"
      return text if text.bytesize <= MAX_LINE + 1

      parts = []
      group = []
      size = 0
      room = MAX_LINE - ENV_HEAD.bytesize - ENV_TAIL.bytesize
      close = lambda do
        parts << (group.length == 1 ? group[0] + "\n" : ENV_HEAD + group.join(',') << ENV_TAIL << "\n")
      end
      msgs.each do |m|
        if group.any? && size + group.length + m.bytesize > room # group.length: the commas
          close.call
          group = []
          size = 0
        end
        group << m
        size += m.bytesize
      end
      close.call
      parts.join
    end

    private

    # Refuses an answer line over the line limit, which the engine would take for a protocol
    # violation (and kill the process): the item fails instead, saying why.
    def check_line(line)
      if line.bytesize > MAX_LINE
        raise ArgumentError, "an output of #{line.bytesize} bytes is over the #{MAX_LINE}-byte line limit of the protocol: pass large data through files in workdir"
      end

      line
    end

    def answer(typ, d, extra = '')
      @out << "{\"type\":\"#{typ}\",\"delivery\":#{STRING_JSON.generate(d)}#{extra}}"
    end

    def error(d, message, retryable)
      answer('error', d, ",\"message\":#{JSON.generate(message.to_s.scrub)},\"retryable\":#{retryable ? 'true' : 'false'}")
    end

    def fail_item(item, exc, log_it = true)
      # a refused state: the engine's words, as it would answer
      return error(item.delivery, item.state_error, false) if exc.is_a?(StateError) && item.state_error

      if exc.is_a?(Abstain)
        answer('abstain', item.delivery, ",\"reason\":#{JSON.generate(exc.reason.to_s.scrub)}")
        return
      end
      loc = exc.backtrace&.first
      msg = "#{exc.class}: #{exc.message}#{loc ? " (#{File.basename(loc)})" : ''}"
      if log_it
        item.log.error('the handler raised: the item fails', error: msg.scrub,
                                                              backtrace: (exc.backtrace || []).join("\n").scrub)
      end
      error(item.delivery, msg, exc.is_a?(Retryable))
    end

    def text_field(name, v)
      v = v.to_s
      utf = v.dup.force_encoding(Encoding::UTF_8)
      return "\"#{name}\":#{JSON.generate(utf)}" if utf.valid_encoding?

      "\"#{name}Base64\":\"#{Base64.strict_encode64(v)}\""
    end

    def headers_json(headers)
      parts = headers.to_a.map do |k, v|
        h = +'{"key":' << JSON.generate(k.to_s)
        h << ',' << text_field('value', v) unless v.nil?
        h << '}'
      end
      ",\"headers\":[#{parts.join(',')}]"
    end

    def emit(item, o)
      value, key, outlet, headers = o.is_a?(Output) ? o.to_a : [o, nil, nil, nil]
      payload = JSON.generate(value)
      kp = if !key.nil? then ",#{text_field('key', key)}"
           elsif !item.raw['key'].nil? then ",\"key\":#{JSON.generate(item.raw['key'])}"
           elsif item.raw['keyBase64'] && !item.raw['keyBase64'].empty? then ",\"keyBase64\":#{JSON.generate(item.raw['keyBase64'])}"
           else ''
           end
      tail = +''
      tail << ',"outlet":' << JSON.generate(outlet.to_s) if outlet
      tail << headers_json(headers) if headers
      # this shape (type, delivery, key, payload) is the one the engine reads fastest
      check_line("{\"type\":\"emit\",\"delivery\":#{JSON.generate(item.delivery)}#{kp},\"payload\":#{payload}#{tail}}")
    end

    def outputs(item, result, keyed)
      return [emit(item, result)] unless keyed
      return [] if result.nil?
      raise TypeError, "a keyed handler returned #{result.class}, not an Array of outputs" unless result.is_a?(Array)

      result.map { |o| emit(item, o) }
    end

    def succeed(item, result, keyed)
      d = STRING_JSON.generate(item.delivery)
      begin
        key = item.raw['key']
        if keyed || result.is_a?(Output) || (key.nil? && item.raw['keyBase64'])
          outputs(item, result, keyed).each { |l| @out << l }
        else
          # a plain map's path, taken by every record: the answers in one format each
          payload = JSON.generate(result)
          @out << check_line(key.nil? ? "{\"type\":\"emit\",\"delivery\":#{d},\"payload\":#{payload}}" : "{\"type\":\"emit\",\"delivery\":#{d},\"key\":#{STRING_JSON.generate(key)},\"payload\":#{payload}}")
        end
      rescue StandardError => e
        fail_item(item, e)
        return
      end
      return error(item.delivery, item.state_error, false) if item.state_error

      @out << "{\"type\":\"state\",\"delivery\":#{d},\"state\":#{item.staged_state}}" if item.staged_state
      @out << "{\"type\":\"done\",\"delivery\":#{d}}"
    end

    def one(raw)
      return start_one(raw) if concurrent?

      item = Item.new(self, raw)
      return error(item.delivery, @config_error, false) if @config_error

      @current = item
      result = begin
        @fn.call(item.payload, item)
      rescue StandardError, ScriptError => e # an exception fails the item, not the process
        @current = nil
        fail_item(item, e, !e.is_a?(Abstain))
        return
      end
      @current = nil
      succeed(item, result, @keyed)
    end

    def run_batch
      items = @pending.map { |r| Item.new(self, r) }
      @pending = []
      return start_batch(items) if concurrent?
      return items.each { |it| error(it.delivery, @config_error, false) } if @config_error

      begin
        results = call_batch(items)
      rescue StandardError, ScriptError => e
        return batch_failed(items, e)
      end
      batch_answers(items, results)
    end

    def call_batch(items)
      results = @fn.call(items)
      results = results.nil? ? [] : results.to_a
      if results.length != items.length
        raise ArgumentError, "the batch handler returned #{results.length} results for #{items.length} items: return one per item, in order"
      end

      results
    end

    def batch_failed(items, exc, logged = items)
      unless exc.is_a?(Abstain)
        Millrace.log.error('the batch handler raised: every item of the batch fails', items: logged.length,
                                                                                       error: "#{exc.class}: #{exc.message}".scrub, backtrace: (exc.backtrace || []).join("\n").scrub)
      end
      items.each { |it| fail_item(it, exc, false) }
    end

    # Answers each item of a batch with its result; with concurrency, an item cancelled
    # meanwhile is skipped (answered already).
    def batch_answers(items, results)
      items.zip(results).each do |it, res|
        next if it.answered == :cancelled

        it.msgs&.each { |m| @out << m }
        if res.is_a?(Exception)
          fail_item(it, res, !(res.is_a?(Abstain) || res.is_a?(Retryable)))
        else
          succeed(it, res, @keyed)
        end
      end
    end

    # With concurrency: one handler call on a thread of its own.

    def start_one(raw)
      item = Item.new(self, raw)
      start_call([item]) do
        if @config_error
          -> { error(item.delivery, @config_error, false) }
        else
          begin
            result = Thread.handle_interrupt(Cancelled => :immediate) { @fn.call(item.payload, item) }
            lambda {
              item.msgs.each { |m| @out << m }
              succeed(item, result, @keyed)
            }
          rescue StandardError, ScriptError => e
            lambda {
              item.msgs.each { |m| @out << m }
              fail_item(item, e, !e.is_a?(Abstain))
            }
          end
        end
      end
    end

    def start_batch(items)
      start_call(items) do
        if @config_error
          -> { items.each { |it| error(it.delivery, @config_error, false) unless it.answered == :cancelled } }
        else
          begin
            results = call_batch(items)
            -> { batch_answers(items, results) }
          rescue StandardError, ScriptError => e
            -> { batch_failed(items.reject { |it| it.answered == :cancelled }, e, items) }
          end
        end
      end
    end

    # Runs the block (the handler's call) on a new thread; the lambda it returns packs the
    # answers, under the lock, unless every item was cancelled meanwhile. Cancelled, raised in
    # the thread by a cancel, is let in only while the handler runs.
    def start_call(items)
      items.each do |it|
        it.msgs = []
        it.envelope = @in_envelope
      end
      # the new thread inherits the mask: a cancel that comes before it runs waits too
      @mu.synchronize do
        t = Thread.handle_interrupt(Cancelled => :never) { Thread.new { run_call(items) { yield } } }
        @calls[t] = true
        items.each do |it|
          it.thread = t
          @inflight[it.delivery] = it
        end
      end
    end

    def run_call(items)
      Thread.current.report_on_exception = false
      Thread.current[:millrace_item] = items[0] if items.length == 1
      Thread.handle_interrupt(Cancelled => :never) do
        pack = begin
          yield
        rescue Cancelled
          nil
        end
        $stdout.flush if $stdout.is_a?(Printed)
        @mu.synchronize do
          @calls.delete(Thread.current)
          live = items.reject { |it| it.answered == :cancelled }
          items.each { |it| @inflight.delete(it.delivery) }
          if pack && live.any?
            live.each { |it| it.answered = true }
            frame_as(items[0].envelope)
            pack.call
            @wrote.signal
          end
        end
      end
    end

    # The engine cancelled delivery d (its timeout passed): answered at once with a retryable
    # error; the handler's thread gets Cancelled (a batch's: only that item's result dropped).
    def cancel(d)
      t = nil
      @mu.synchronize do
        it = @inflight.delete(d)
        return if it.nil? || it.answered # not held, or answered already: a race the protocol allows

        it.answered = :cancelled
        frame_as(it.envelope)
        error(d, "cancelled: the engine cancelled delivery #{d} (its timeout passed); what its handler returns is dropped", true)
        @wrote.signal
        t = it.thread if @size.zero?
      end
      t&.raise(Cancelled, "delivery #{d} cancelled by the engine")
    end

    # The writer thread: writes what the calls answered since it last woke, in one write.
    def write_answers
      loop do
        data = @mu.synchronize do
          @wrote.wait(@mu) while @out.empty? && @held.empty? && !@closing
          take
        end
        if data.empty?
          break if @closing

          next
        end
        @io.write(data)
        @io.flush
      end
    rescue Errno::EPIPE, IOError
      nil # the engine is gone
    end

    # Waits for every handler call, then for the writer to write their answers.
    def finish_calls
      return unless concurrent?

      loop do
        t = @mu.synchronize { @calls.keys.first }
        break if t.nil?

        begin
          t.join
        rescue Cancelled
          nil # cancelled after its handler returned: nothing was left to drop
        end
        @mu.synchronize { @calls.delete(t) }
      end
      @mu.synchronize do
        @closing = true
        @wrote.signal
      end
      @writer.join
    end

    def on_hello(msg)
      @hello = true
      @vars = msg['vars'] || {}
      raw = msg['config'].nil? ? {} : msg['config']
      begin
        @config = Millrace.check_config(@spec, raw)
      rescue StandardError => e
        text = e.is_a?(ConfigError) ? e.message : "#{e.class}: #{e.message}"
        @config_error = "#{text} (fix the config; every item fails until then)"
        Millrace.log.error('bad config', error: @config_error)
      end
      inlets = msg['state']
      if !inlets.nil? && !inlets.is_a?(Hash)
        Millrace.log.error('hello\'s "state" is not an object of inlets ({"PORT":{"maxBytes":N}}); no inlet keeps state', state: inlets.inspect[0, 100])
        inlets = nil
      end
      @state_inlets = inlets || {}
      # state is declared only when the action line keeps state, as the Go SDK does; concurrent
      # and cancel only with concurrency
      ready = "{\"type\":\"ready\",\"window\":#{@window},\"batch\":true#{concurrent? ? ',"concurrent":true,"cancel":true' : ''}" \
              "#{@state_inlets.empty? ? '' : ',"state":true'}}"
      return @mu.synchronize { ready_line(ready) } if concurrent?

      ready_line(ready)
    end

    def ready_line(ready)
      if concurrent?
        frame_as(false) # ready is a line of its own, never in an envelope
        @out << ready
        @wrote.signal
        return
      end
      flush
      frame_as(false)
      @out << ready
      flush
    end

    # Handles one line; false on shutdown.
    def on_line(line)
      msg = begin
        JSON.parse(line)
      rescue JSON::ParserError => e
        Millrace.log.error('a line from the engine is not JSON; ignored', error: e.message[0, 200].scrub, line: line[0, 100].scrub)
        return true
      end
      return true unless msg.is_a?(Hash)

      if msg['type'] == 'batch'
        msgs = msg['messages']
        unless msgs.is_a?(Array)
          Millrace.log.error('a batch envelope from the engine without a messages array; ignored', line: line[0, 100].scrub)
          return true
        end
        envelope(true)
        msgs.each { |m| return false unless on_message(m) }
        # the items of an envelope are what the engine had room to write at once: a batch
        # handler gets them without waiting for the linger
        run_batch if @pending.any?
        return true
      end
      envelope(false)
      on_message(msg)
    end

    # Answers take the framing of what they answer: one at a time, set as each line is read;
    # with concurrency, kept with each item, to frame its answers when they are packed.
    def envelope(yes)
      return @in_envelope = yes if concurrent?

      frame_as(yes)
    end

    # Handles one message, on its own line or in an envelope; false on shutdown.
    def on_message(msg)
      return true unless msg.is_a?(Hash)

      case msg['type']
      when 'item'
        if !@hello
          Millrace.log.error('an item before hello; answering error', delivery: msg['delivery'])
          if concurrent?
            @mu.synchronize { error(msg['delivery'] || '', 'an item before hello', false) }
          else
            error(msg['delivery'] || '', 'an item before hello', false)
          end
        elsif @size.positive?
          @pending_since = now if @pending.empty?
          @pending << msg
          run_batch if @pending.length >= @size
        else
          one(msg)
        end
        flush if now - @last_flush > FLUSH_AFTER
      when 'hello'
        on_hello(msg)
      when 'cancel'
        cancel(msg['delivery']) if concurrent? # declared only then
      when 'shutdown'
        run_batch if @pending.any?
        return false
      end
      true # unknown types are ignored, as unknown keys are
    end
  end
end
