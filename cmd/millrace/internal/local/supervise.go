package local

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/sidecar"
)

// running is one streamlet's bridge and sidecar.
type running struct {
	s       *actiondir.Streamlet
	sc      *sidecar.Sidecar
	metrics *bridge.Metrics
	srv     *bridge.Server
	group   string
	errs    *lastError
	faults  *faults
	sidecar *task
	bridge  *task
}

// task is a goroutine running fn until its context is cancelled.
type task struct {
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

func startTask(ctx context.Context, fn func(context.Context) error) *task {
	ctx, cancel := context.WithCancel(ctx)
	t := &task{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(t.done)
		t.err = fn(ctx)
	}()
	return t
}

// stop cancels the task and waits for it. It may be called more than once.
func (t *task) stop() error {
	t.cancel()
	<-t.done
	return t.err
}

// ended reports whether the task returned, and its error.
func (t *task) ended() (bool, error) {
	select {
	case <-t.done:
		return true, t.err
	default:
		return false, nil
	}
}

// The sidecars' backoffs in `millrace run`, shorter than a deployment's: the bridge is in the
// same process and up at once, and an author waits at the terminal for a fixed program to run.
var (
	localDiscoveryBackoff = sidecar.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	localFailureBackoff   = sidecar.Backoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second}
)

// startStreamlet starts a streamlet's bridge on a free loopback port and its sidecar.
func (r *runner) startStreamlet(ctx context.Context, s *actiondir.Streamlet, brokers []string) (*running, error) {
	name := s.Action.Name
	st := &running{s: s, metrics: bridge.NewMetrics(0), errs: &lastError{}, group: r.p.Name + "." + name, faults: newFaults(name, s.Action.DeadLetter != "")}
	blog := slog.New(&teeHandler{h: faultHandler{r.log.Handler(), st.faults}, last: st.errs}).With("part", "bridge") // the bridge names the streamlet
	var tracer *bridge.Tracer
	if r.opts.Getenv != nil {
		export, err := bridge.SpanExportFromEnv(r.opts.Getenv)
		if err != nil {
			return nil, fmt.Errorf("the span export of %s: %w", name, err)
		}
		if export {
			if tracer, err = bridge.NewTracer(ctx, name, r.opts.Version, blog); err != nil {
				return nil, fmt.Errorf("the span export of %s: %w", name, err)
			}
		}
	}
	events := func(e bridge.Event) { st.faults.event(context.WithoutCancel(ctx), e) }
	if obs := r.opts.Observer; obs != nil {
		events = func(e bridge.Event) {
			st.faults.event(context.WithoutCancel(ctx), e)
			obs.Event(e)
		}
	}
	sidecarPort := 0 // a stateless line dials no State service
	if len(s.Action.State) > 0 {
		var err error
		if sidecarPort, err = freeLoopbackPort(); err != nil {
			_ = tracer.Shutdown(ctx)
			return nil, fmt.Errorf("streamlet %s: %w", name, err)
		}
	}
	srv, err := bridge.NewServer(bridge.Options{Action: s.Action.Action, Version: r.opts.Version, Logger: blog, Metrics: st.metrics, Tracer: tracer, Events: events, Registry: r.lr.registryOf(s), SidecarPort: sidecarPort})
	if err != nil {
		_ = tracer.Shutdown(ctx)
		return nil, err
	}
	st.srv = srv
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = tracer.Shutdown(ctx)
		return nil, fmt.Errorf("a loopback port for the bridge of %s: %w", name, err)
	}
	st.bridge = startTask(ctx, func(ctx context.Context) error {
		err := srv.Serve(ctx, lis)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if terr := tracer.Shutdown(sctx); terr != nil { // the spans still buffered, flushed
			blog.Warn("spans not exported at the end of the run", "error", terr)
		}
		return err
	})

	cfg := r.sidecarConfig(s, st.group, brokers, lis.Addr().(*net.TCPAddr).Port, sidecarPort)
	slogger := slog.New(&teeHandler{h: faultHandler{r.log.Handler(), st.faults}, last: st.errs}).With("streamlet", name, "part", "sidecar")
	sc, err := sidecar.New(cfg, slogger)
	if err != nil {
		_ = st.bridge.stop()
		return nil, fmt.Errorf("the sidecar of %s: %w", name, err)
	}
	st.sc = sc
	st.sidecar = startTask(ctx, sc.Run)
	return st, nil
}

// sidecarConfig is the configuration of a streamlet's in-process sidecar, as `millrace sidecar`
// would read it from a deployment's variables: the streamlet's bindings, the bridge's port and,
// for a line with --state, each stateful inlet's changelog (STREAMLET.PORT.state, which
// createChangelogs made), the State service's port and the store's folder under the run's.
func (r *runner) sidecarConfig(s *actiondir.Streamlet, group string, brokers []string, processPort, sidecarPort int) *sidecar.Config {
	name := s.Action.Name
	cfg := &sidecar.Config{
		Brokers: brokers, Pipeline: r.p.Name, Streamlet: name, Deployed: s.Action.Spec(r.opts.Version),
		ConfigValues: s.Values, ProcessPort: processPort, SidecarVersion: r.opts.Version,
		ConsumerGroup:     group,
		StallWarningAfter: r.opts.StallAfter,
		DiscoveryBackoff:  localDiscoveryBackoff,
		FailureBackoff:    localFailureBackoff,
	}
	if r.opts.ExactlyOnce {
		// One sidecar per streamlet here: the group names it, across runs on one --data.
		cfg.Delivery, cfg.TransactionalID = sidecar.ExactlyOnce, group+".local"
	}
	changelog := map[string]string{}
	for _, c := range s.Action.Changelogs(name) {
		changelog[c.Inlet] = c.Topic
	}
	if len(changelog) > 0 {
		cfg.StateDir, cfg.SidecarPort = filepath.Join(r.stateRoot, name), sidecarPort
	}
	for _, p := range s.Action.Inlets {
		cfg.Inlets = append(cfg.Inlets, sidecar.Inlet{Port: p.Name, Topic: s.Bindings[p.Name], StateTopic: changelog[p.Name]}) // the default batch limits
	}
	for _, p := range s.Action.Outlets {
		cfg.Outlets = append(cfg.Outlets, sidecar.Outlet{Port: p.Name, Topic: s.Bindings[p.Name]})
	}
	return cfg
}
