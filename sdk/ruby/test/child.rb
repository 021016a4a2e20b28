# frozen_string_literal: true

# Child: testdata/action.rb started as a child over real pipes, spoken to as the engine does.
require 'json'
require 'open3'
require 'timeout'

ACTION = File.expand_path('../testdata/action.rb', __dir__)
WAIT = 10 # seconds for any one line: a bound on a hang, not a speed target
MAX_LINE = 8 << 20 # stdio.MaxLineBytes

class Child
  attr_reader :stderr_text, :frames

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
    @msgs = [] # messages of the last line read not yet returned
    @frames = [] # per line read: 'line', or ['batch', its message count]
  end

  def send_msgs(*msgs)
    @in.write(msgs.map { |m| JSON.generate(m) + "\n" }.join)
    @in.flush
  end

  # Writes msgs as one batch envelope, as the engine does for a run of items.
  def send_batch(*msgs) = send_msgs({ 'type' => 'batch', 'messages' => msgs })

  def raw_line
    line = Timeout.timeout(WAIT) { @lines.pop }
    raise "stdout ended; stderr: #{@err_reader.join(WAIT) && @stderr_text}" if line.nil?
    raise "a line without newline: #{line.inspect}" unless line.end_with?("\n")
    raise "a line of #{line.bytesize - 1} bytes, over the line limit" if line.bytesize - 1 > MAX_LINE

    line.chomp.force_encoding(Encoding::UTF_8)
  end

  # The next message, from a line of its own or from a batch envelope.
  def read
    while @msgs.empty?
      m = JSON.parse(raw_line)
      if m['type'] == 'batch'
        @frames << ['batch', m['messages'].length]
        @msgs = m['messages']
      else
        @frames << 'line'
        @msgs = [m]
      end
    end
    @msgs.shift
  end

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
