package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/ui"
)

// runRun is `millrace run DIR|LINE|PIPELINE`: the streamlets against a local Kafka broker, the
// sidecar and the bridge as in production, input lines in, output records out.
func runRun(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "run", "DIR|LINE|PIPELINE-FILE [--input FILE|-] [--bare] [--follow] [--set KEY=VALUE]… [--brokers HOST:PORT,…] [--data DIR] [--partitions N] [--stall D] [--metrics ADDR] [--exactly-once] [--schema PORT[.key]=FILE]… [--ui[=ADDR]] [-v]")
	input := fs.String("input", "", "input lines, one record each: FILE, or - for stdin (default: stdin when it is not a terminal)")
	bare := fs.Bool("bare", false, "each input line is a JSON payload, not an envelope {\"key\", \"payload\", \"headers\"}")
	follow := fs.Bool("follow", false, "keep running when the input is done, until Ctrl-C")
	brokers := fs.String("brokers", "", "a Kafka cluster to use instead of the in-process broker, comma-separated")
	data := fs.String("data", "", "keep the in-process broker's data in DIR, across runs, and the state of streamlets with --state in DIR/state")
	partitions := fs.Int("partitions", 0, "partitions of each topic created (default 1); an existing topic (--data, --brokers) must have as many")
	stall := fs.Duration("stall", 10*time.Second, "stop with an error when a batch keeps failing this long")
	metrics := fs.String("metrics", "", "serve Prometheus `ADDR`/metrics (HOST:PORT or :PORT): both halves of every streamlet, the sidecar's and the bridge's, labelled streamlet")
	verbose := fs.Bool("v", false, "log at info level (default: warnings and errors)")
	exactlyOnce := fs.Bool("exactly-once", false, "run the sidecars with FLOW_DELIVERY=exactly-once: each commit round one Kafka transaction")
	pageFlag := &uiFlag{}
	fs.Var(pageFlag, "ui", "serve a live page of the run on loopback: its pipeline graph, records, stderr per item, state per key, a form to send a record (docs/ui.md); --ui alone picks a free port, --ui=ADDR (127.0.0.1:PORT) a given one; the page stays up after the run ends, until Ctrl-C")
	set := keyValues{}
	schemas := schemaFiles{}
	fs.Var(schemas, "schema", "PORT[.key]=FILE: the schema of an encoded port (--decode/--encode), .avsc, .proto or .json (repeatable; default: the action directory's schemas/PORT.EXT); the run starts an embedded schema registry")
	fs.Var(set, "set", "KEY=VALUE: a deploy-time config value of the action (repeatable; in a pipeline file, --set goes on the streamlet's line)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 2 && pageFlag.addr == ui.DefaultAddr && looksLikeAddr(pos[1]) {
		return fs.usageErr(fmt.Sprintf("--ui takes its address after =: --ui=%s (the flag alone picks a free port)", pos[1]))
	}
	if len(pos) != 1 {
		return fs.usageErr(fmt.Sprintf("expected one action directory, config line (quoted) or pipeline file, got %d arguments", len(pos)))
	}
	// A flag that would do nothing is a mistake, not a no-op.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case *data != "" && *brokers != "":
		return fs.usageErr("--data keeps the in-process broker's data; with --brokers the cluster keeps it: give one or the other")
	case *partitions < 0 || given["partitions"] && *partitions == 0:
		return fs.usageErr(fmt.Sprintf("--partitions %d: topics need at least 1 partition", *partitions))
	case *stall <= 0:
		return fs.usageErr(fmt.Sprintf("--stall %s: give a positive duration, e.g. 10s", *stall))
	case *bare && *input == "" && isTerminal(e.stdin):
		return fs.usageErr("--bare says how input lines are read, and there is no input: give --input FILE, or pipe the lines to stdin")
	}
	p, err := loadRunnable(pos[0])
	if err != nil {
		return err
	}
	if len(set) > 0 {
		if len(p.Streamlets) > 1 {
			return fs.usageErr("--set applies to one action; in a pipeline file put --set KEY=VALUE on the streamlet's line")
		}
		p.Streamlets[0].Values = set
	}

	out := &termWriter{w: e.stderr, term: isTerminal(e.stderr)}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	opts := local.Options{
		Bare: *bare, Follow: *follow, DataDir: *data, Partitions: *partitions, StallAfter: *stall,
		Out: e.stdout, Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level})),
		Version: Version(), Getenv: e.getenv, ExactlyOnce: *exactlyOnce, Schemas: schemas,
	}
	if *metrics != "" {
		lis, err := net.Listen("tcp", *metrics)
		if err != nil {
			return fmt.Errorf("--metrics %s: %w; pick a free address, e.g. --metrics 127.0.0.1:9100", *metrics, err)
		}
		defer lis.Close()
		fmt.Fprintf(out, "millrace run: metrics at http://%s/metrics\n", lis.Addr())
		opts.Metrics = lis
	}
	if out.term {
		opts.Progress = progressWriter{out}
	}
	var page *ui.Server
	if pageFlag.addr != "" {
		if page, err = ui.New(pageFlag.addr, opts.Logger); err != nil {
			return err
		}
		stopPage := servePage(ctx, page)
		defer stopPage()
		fmt.Fprintf(out, "millrace run: the run's page is at %s\n", page.URL())
		opts.Observer = page
	}
	if *data != "" || *follow {
		// the broker lives as long as the run: say where it is, for millrace replay meanwhile
		opts.BrokerStarted = func(addrs []string) {
			where := "in memory"
			if *data != "" {
				where = "its data in " + *data
			}
			fmt.Fprintf(out, "millrace run: the in-process Kafka broker listens at %s (%s); while this run goes on, point other tools at it: millrace replay … --brokers %s\n", strings.Join(addrs, ","), where, strings.Join(addrs, ","))
		}
	}
	if *brokers != "" {
		opts.Brokers = strings.Split(*brokers, ",")
	}
	switch {
	case *input == "-":
		opts.Input = e.stdin
	case *input != "":
		f, err := os.Open(*input)
		if err != nil {
			return fmt.Errorf("the input: %w", err)
		}
		defer f.Close()
		opts.Input = f
	case !isTerminal(e.stdin):
		opts.Input = e.stdin
	}
	// The first Ctrl-C stops cleanly; a second one quits at once, leaving nothing behind.
	release := sync.OnceFunc(quitOnSecondSignal(ctx, out,
		"millrace run: stopping: finishing the batches in flight and committing them (Ctrl-C again to quit at once)",
		"millrace run: quit before the batches in flight were committed; the action's processes were killed and their work folders removed (with --data or --brokers the next run processes them again)"))
	defer release()
	sum, err := local.Run(ctx, p, opts)
	release() // a Ctrl-C from here on only closes the page
	if sum != nil {
		fmt.Fprintf(e.stderr, "millrace run: %s: %s\n", p.Name, sum)
	}
	if page != nil && page.RunStarted() && ctx.Err() == nil {
		// browsable after the run, until the author is done with it
		fmt.Fprintf(out, "millrace run: the run has ended; its page stays at %s until Ctrl-C\n", page.URL())
		<-ctx.Done()
	}
	switch {
	case errors.Is(err, local.ErrInterrupted):
		return &exitError{code: exitInterrupted, msg: err.Error()}
	case err != nil:
		return err
	}
	return nil
}

// loadRunnable reads what `millrace run` was given: an action directory, a pipeline file, an
// action config file, or a config line.
func loadRunnable(arg string) (*actiondir.Pipeline, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() && actiondir.IsPipelineFile(arg) {
		return actiondir.LoadPipeline(arg)
	}
	a, err := actiondir.Load(arg)
	if err != nil {
		return nil, err
	}
	p := actiondir.Single(a)
	p.Name = a.Name
	return p, nil
}

// termWriter serialises stderr between logs and the progress line; on a terminal each log
// line first clears the progress line it would otherwise run into.
type termWriter struct {
	mu   sync.Mutex
	w    io.Writer
	term bool
}

func (t *termWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.term {
		if _, err := io.WriteString(t.w, "\r\033[K"); err != nil {
			return 0, err
		}
	}
	return t.w.Write(p)
}

// progressWriter writes the progress line as given (it redraws itself with \r).
type progressWriter struct{ t *termWriter }

func (p progressWriter) Write(b []byte) (int, error) {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	return p.t.w.Write(b)
}

// schemaFiles are the --schema flags of millrace run.
type schemaFiles map[string]string

func (s schemaFiles) String() string { return "" }

func (s schemaFiles) Set(v string) error { return local.ParseSchemaFlag(s, v) }

// uiFlag is --ui[=ADDR]: alone, the page on a free loopback port.
type uiFlag struct{ addr string }

func (f *uiFlag) String() string { return "" }

func (f *uiFlag) IsBoolFlag() bool { return true }

func (f *uiFlag) Set(v string) error {
	switch v {
	case "true":
		f.addr = ui.DefaultAddr
	case "false":
		f.addr = ""
	default:
		f.addr = v
	}
	return nil
}

// looksLikeAddr reports whether a word is HOST:PORT or :PORT and names no file: an address
// meant for --ui and given after a space.
func looksLikeAddr(w string) bool {
	if _, err := os.Stat(w); err == nil {
		return false
	}
	_, port, err := net.SplitHostPort(w)
	return err == nil && port != ""
}

// servePage serves the run's page until the returned stop is called.
func servePage(ctx context.Context, page *ui.Server) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = page.Serve(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
