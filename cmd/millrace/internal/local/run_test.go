package local_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// prepare sets the brokers of opts from the environment and, on a real cluster, gives p's
// topics and consumer groups a fresh suffix, so runs never see each other's records.
func prepare(t *testing.T, p *actiondir.Pipeline, opts *local.Options) {
	t.Helper()
	brokers := testkit.RealBrokers()
	if brokers == nil {
		return
	}
	opts.Brokers = brokers
	suffix := fmt.Sprintf("-%d", time.Now().UnixNano())
	rename := func(topic string) string { return topic + suffix }
	p.Name += suffix
	p.Input = rename(p.Input)
	for _, s := range p.Streamlets {
		for port, topic := range s.Bindings {
			s.Bindings[port] = rename(topic)
		}
	}
}

// initAction writes a raw (Python) action for the run tests.
func initAction(t *testing.T, name string) string {
	t.Helper()
	needRuntimes(t, "raw")
	dir := filepath.Join(t.TempDir(), name)
	if err := actiondir.Init(context.Background(), dir, "raw", actiondir.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestRunSingle: input lines in, every output record out as JSON lines, then Run returns on
// its own with a complete summary.
func TestRunSingle(t *testing.T) {
	dir := initAction(t, "greet")
	a, err := actiondir.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	in := `{"key": "u1", "payload": {"name": "Ada"}}
{"key": "u2", "payload": {"name": "Zoë"}, "headers": [{"key": "source", "value": "sample"}]}
{"payload": {"name": "Grace"}}
`
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := actiondir.Single(a)
	opts := local.Options{Input: strings.NewReader(in), Out: &out, Logger: testLogger(t), Version: "test"}
	prepare(t, p, &opts)
	sum, err := local.Run(ctx, p, opts)
	if err != nil {
		t.Fatalf("Run = %v (summary %v)", err, sum)
	}
	want := `{"outlet":"out","key":"u1","payload":{"message":"Hello, Ada!"},"headers":[{"key":"traceparent","value":"00-…"}]}
{"outlet":"out","key":"u2","payload":{"message":"Hello, Zoë!"},"headers":[{"key":"traceparent","value":"00-…"}]}
{"outlet":"out","payload":{"message":"Hello, Grace!"},"headers":[{"key":"traceparent","value":"00-…"}]}
`
	if maskTrace(out.String()) != want {
		t.Fatalf("Run printed\n%s\nwant\n%s", out.String(), want)
	}
	if !sum.Complete || sum.In != 3 || sum.Total() != 3 || sum.Failed != 0 {
		t.Fatalf("summary = %+v; want complete, 3 in, 3 out, 0 failed", sum)
	}
}

// traceValue matches the traceparent header an output gets from the bridge: trace-id, span.
var traceValue = regexp.MustCompile(`"traceparent","value":"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}"`)

// maskTrace replaces the traceparent values in s, drawn per run, with 00-….
func maskTrace(s string) string {
	return traceValue.ReplaceAllString(s, `"traceparent","value":"00-…"`)
}

// TestRunLastLineWithoutNewline: the last input line is a line with or without its newline
// (printf '{"name":"Ada"}' | millrace run greet --bare).
func TestRunLastLineWithoutNewline(t *testing.T) {
	dir := initAction(t, "greet")
	a, err := actiondir.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		in   string
		bare bool
		want string
	}{
		{in: `{"name":"Ada"}`, bare: true, want: `{"outlet":"out","payload":{"message":"Hello, Ada!"},"headers":[{"key":"traceparent","value":"00-…"}]}` + "\n"},
		{in: "{\"payload\": {\"name\": \"Ada\"}}\n{\"key\": \"g\", \"payload\": {\"name\": \"Grace\"}}", want: `{"outlet":"out","payload":{"message":"Hello, Ada!"},"headers":[{"key":"traceparent","value":"00-…"}]}` + "\n" + `{"outlet":"out","key":"g","payload":{"message":"Hello, Grace!"},"headers":[{"key":"traceparent","value":"00-…"}]}` + "\n"},
	} {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p := actiondir.Single(a)
		opts := local.Options{Input: strings.NewReader(tt.in), Bare: tt.bare, Out: &out, Logger: testLogger(t), Version: "test"}
		prepare(t, p, &opts)
		sum, err := local.Run(ctx, p, opts)
		cancel()
		if err != nil {
			t.Fatalf("Run(%q) = %v (summary %v)", tt.in, err, sum)
		}
		if maskTrace(out.String()) != tt.want || sum.In != strings.Count(tt.want, "\n") {
			t.Errorf("Run(%q) printed\n%s\nsummary %+v; want\n%s", tt.in, out.String(), sum, tt.want)
		}
	}
}

// writeUpper writes an action that upper-cases the message of each greeting.
func writeUpper(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		"action.conf": "upper --in in=greeting.v1 --out out=greeting.v1 -- python3 main.py\n",
		"main.py": `import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m["type"] == "hello":
        print(json.dumps({"type": "ready"}), flush=True)
    elif m["type"] == "item":
        d = m["delivery"]
        out = {"type": "emit", "delivery": d, "payload": {"message": m["payload"]["message"].upper()}}
        if "key" in m:
            out["key"] = m["key"]
        print(json.dumps(out, ensure_ascii=False), flush=True)
        print(json.dumps({"type": "done", "delivery": d}), flush=True)
    elif m["type"] == "shutdown":
        sys.exit(0)
`,
	}
	for name, content := range files {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunPipeline: two streamlets, the output of the first feeding the second through a topic
// the pipeline file binds, with a config value set; every record of both outlets is printed.
func TestRunPipeline(t *testing.T) {
	// In exactly-once mode the inner topic (greet's outlet, upper's inlet) ends with
	// transaction markers no commit covers: the run must still see it caught up.
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once=%v", exactlyOnce), func(t *testing.T) {
			root := t.TempDir()
			greet := initAction(t, "greet")
			writeUpper(t, filepath.Join(root, "upper"))
			pipeline := filepath.Join(root, "greetings.pipeline")
			content := "# names → greetings → GREETINGS\ninput names\n" + greet + " in=names out=greetings --set greeting=Hi\nupper in=greetings out=loud\n"
			if err := os.WriteFile(pipeline, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			if !actiondir.IsPipelineFile(pipeline) {
				t.Fatalf("IsPipelineFile(%s) = false", pipeline)
			}
			p, err := actiondir.LoadPipeline(pipeline)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			in := "{\"name\": \"Ada\"}\n{\"name\": \"Zoë\"}\n"
			opts := local.Options{Input: strings.NewReader(in), Bare: true, Out: &out, Logger: testLogger(t), Version: "test", ExactlyOnce: exactlyOnce}
			prepare(t, p, &opts)
			sum, err := local.Run(ctx, p, opts)
			if err != nil {
				t.Fatalf("Run = %v (summary %v)", err, sum)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			var greets, louds []string
			for _, l := range lines {
				switch {
				case strings.HasPrefix(l, `{"streamlet":"greet","outlet":"out"`):
					greets = append(greets, l)
				case strings.HasPrefix(l, `{"streamlet":"upper","outlet":"out"`):
					louds = append(louds, l)
				default:
					t.Errorf("unexpected output line %s", l)
				}
			}
			wantLoud := []string{`{"streamlet":"upper","outlet":"out","payload":{"message":"HI, ADA!"},"headers":[{"key":"traceparent","value":"00-…"}]}`,
				`{"streamlet":"upper","outlet":"out","payload":{"message":"HI, ZOË!"},"headers":[{"key":"traceparent","value":"00-…"}]}`}
			if len(greets) != 2 || maskTrace(strings.Join(louds, "\n")) != strings.Join(wantLoud, "\n") {
				t.Fatalf("Run printed\n%s\nwant 2 greet lines and\n%s", out.String(), strings.Join(wantLoud, "\n"))
			}
			// One trace from the first streamlet's input to the second one's output, a span per hop.
			for i := range greets {
				g, u := traceValue.FindStringSubmatch(greets[i]), traceValue.FindStringSubmatch(louds[i])
				if g[1] != u[1] || g[2] == u[2] {
					t.Errorf("greet output %s and upper output %s: want the same trace, another parent span", g[0], u[0])
				}
			}
			if sum.In != 2 || sum.Out["greet.out"] != 2 || sum.Out["upper.out"] != 2 || !sum.Complete {
				t.Fatalf("summary = %+v", sum)
			}
		})
	}
}

// TestRunExamplePipeline runs actions/orders.pipeline: route-orders (Node) feeding its
// per-customer totals to convert-currency (Go), an invalid order dead-lettered.
func TestRunExamplePipeline(t *testing.T) {
	testkit.NeedTools(t, "node", "go") // the example pipeline
	p, err := actiondir.LoadPipeline("../../../../actions/orders.pipeline")
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open("../../../../actions/route-orders/sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := local.Options{Input: in, Out: &out, Logger: testLogger(t), Version: "test"}
	prepare(t, p, &opts)
	sum, err := local.Run(ctx, p, opts)
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if sum.Out["route-orders.totals"] == 0 || sum.Out["convert-currency.converted"] != sum.Out["route-orders.totals"] || sum.Out["route-orders.invalid"] != 1 {
		t.Fatalf("summary %s; want every total converted and one invalid order\n%s", sum, out.String())
	}
	if !strings.Contains(out.String(), `"rate":1.1`) {
		t.Fatalf("output lacks the rate set by --set rate=1.1:\n%s", out.String())
	}
}

// TestRunFaults: each fault ends the run with its error and a reason a person can act on.
func TestRunFaults(t *testing.T) {
	dir := initAction(t, "greet")
	a, err := actiondir.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		p       func() *actiondir.Pipeline
		in      string
		opts    local.Options
		wantErr error
		want    string
	}{
		{name: "bad-input", in: "{\"name\": \"Ada\"}\n", wantErr: local.ErrInput, want: `line 1: json: unknown field "name"`},
		{name: "bare-not-json", in: "{}\nnot json\n", opts: local.Options{Bare: true}, wantErr: local.ErrInput, want: "line 2: not JSON"},
		// The topics keep the broker's defaults, as a user's cluster has them: a record over
		// Kafka's default max.message.bytes is refused, naming the line and the limit.
		{name: "over-topic-limit", in: "{}\n\"" + strings.Repeat("x", 1100<<10) + "\"\n", opts: local.Options{Bare: true}, wantErr: local.ErrInput, want: "line 2: its record is 1126402 bytes, more than topic"},
		{name: "stall", in: "{\"payload\": {\"id\": 4}}\n", opts: local.Options{StallAfter: time.Second}, wantErr: local.ErrStalled, want: "payload has no name"},
		{name: "refused", in: "", p: func() *actiondir.Pipeline {
			p := actiondir.Single(a)
			p.Streamlets[0].Values = map[string]string{"nope": "1"}
			return p
		}, wantErr: local.ErrRefused, want: "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := actiondir.Single(a)
			if tt.p != nil {
				p = tt.p()
			}
			opts := tt.opts
			opts.Input, opts.Logger, opts.Version = strings.NewReader(tt.in), testLogger(t), "test"
			prepare(t, p, &opts)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := local.Run(ctx, p, opts)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run(%s) = %v; want %v containing %q", tt.name, err, tt.wantErr, tt.want)
			}
		})
	}
}

// TestRunInterrupted: ctx ending stops the run cleanly; with Follow that is the way it ends.
func TestRunInterrupted(t *testing.T) {
	dir := initAction(t, "greet")
	a, err := actiondir.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, follow := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		var out bytes.Buffer
		done := make(chan error, 1)
		pr, pw := io.Pipe()
		p := actiondir.Single(a)
		opts := local.Options{Input: pr, Out: &out, Follow: follow, Logger: testLogger(t), Version: "test"}
		prepare(t, p, &opts)
		go func() {
			_, err := local.Run(ctx, p, opts)
			done <- err
		}()
		// The run reads its input once the pipeline is up; a run that ends before (it failed)
		// is reported with its error, not left blocking this write.
		wrote := make(chan error, 1)
		go func() {
			_, err := pw.Write([]byte("{\"key\": \"k\", \"payload\": {\"name\": \"Ada\"}}\n"))
			wrote <- err
		}()
		var err error
		select {
		case err = <-wrote:
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			err = <-done
		case err = <-done:
			cancel()
			t.Fatalf("Run(follow %v) ended before it read its input: %v", follow, err)
		}
		pw.Close()
		if follow && err != nil || !follow && !errors.Is(err, local.ErrInterrupted) {
			t.Fatalf("Run(follow %v) after cancel = %v", follow, err)
		}
	}
}

// TestRunDataDir: with DataDir the broker keeps topics and committed offsets across runs, so a
// second run handles only its own input.
func TestRunDataDir(t *testing.T) {
	if testkit.RealBrokers() != nil {
		t.Log("DataDir is the in-process broker's; checked without " + testkit.EnvBrokers)
	}
	dir := initAction(t, "greet")
	a, err := actiondir.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	for i, in := range []string{`{"key": "u1", "payload": {"name": "Ada"}}` + "\n", `{"key": "u2", "payload": {"name": "Grace"}}` + "\n"} {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sum, err := local.Run(ctx, actiondir.Single(a), local.Options{DataDir: data, Input: strings.NewReader(in), Out: &out, Logger: testLogger(t), Version: "test"})
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		if sum.Total() != 1 || strings.Count(out.String(), "\n") != 1 {
			t.Fatalf("run %d printed\n%s; want its one output only", i+1, out.String())
		}
	}
}
