package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/internal/httpserve"
)

// labelStreamlet names the streamlet of every series a run serves, as the deploy's scrape
// configuration labels a pod's.
const labelStreamlet = "streamlet"

// metricsEndpoint is one address a run serves /metrics on, and the streamlets it shows.
type metricsEndpoint struct {
	lis        net.Listener
	streamlets []string // names; all of the run's for Options.Metrics
	all        bool
}

// metricsListeners opens what the run serves metrics on: opts.Metrics for every streamlet, and
// the address of each streamlet whose action config line says --metrics ADDR (a streamlet
// named on one address twice is shown once). On an error it closes what it opened.
func (r *runner) metricsListeners() ([]*metricsEndpoint, error) {
	var eps []*metricsEndpoint
	if r.opts.Metrics != nil {
		eps = append(eps, &metricsEndpoint{lis: r.opts.Metrics, all: true})
	}
	byAddr := map[string]*metricsEndpoint{}
	for _, s := range r.p.Streamlets {
		addr := s.Action.Metrics
		if addr == "" {
			continue
		}
		if ep := byAddr[addr]; ep != nil {
			ep.streamlets = append(ep.streamlets, s.Action.Name)
			continue
		}
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			for _, ep := range eps {
				if !ep.all {
					ep.lis.Close()
				}
			}
			return nil, fmt.Errorf("streamlet %s: cannot serve its metrics on --metrics %s (its action config line): %w; pick a free address, or leave --metrics out of the line and give millrace run --metrics ADDR", s.Action.Name, addr, err)
		}
		ep := &metricsEndpoint{lis: lis, streamlets: []string{s.Action.Name}}
		byAddr[addr] = ep
		eps = append(eps, ep)
	}
	return eps, nil
}

// serveMetrics serves each endpoint's streamlets until the returned stop is called; stop
// ends every server as [httpserve.Serve] does, closing the listeners (Options.Metrics too),
// and waits for them.
func (r *runner) serveMetrics(eps []*metricsEndpoint) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, ep := range eps {
		g := &streamletGatherer{}
		for _, st := range r.streamlets {
			if ep.all || slices.Contains(ep.streamlets, st.s.Action.Name) {
				g.streamlets = append(g.streamlets, st)
			}
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
		r.log.Info("serving metrics", "address", ep.lis.Addr().String(), "path", "/metrics", "streamlets", strings.Join(g.names(), ","))
		lis := ep.lis
		wg.Go(func() {
			if err := httpserve.Serve(ctx, lis, mux); err != nil {
				r.log.Error("the metrics server stopped", "address", lis.Addr().String(), "error", err)
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// streamletGatherer gathers both halves of some streamlets, the sidecar's registry and the
// bridge's, as one: every series gets the label streamlet, so the same metric of two
// streamlets stays two series.
type streamletGatherer struct {
	streamlets []*running
}

var _ prometheus.Gatherer = (*streamletGatherer)(nil)

func (g *streamletGatherer) names() []string {
	var ns []string
	for _, st := range g.streamlets {
		ns = append(ns, st.s.Action.Name)
	}
	return ns
}

// Gather merges the families of every registry by name. A registry that fails is reported
// with what the others gathered.
func (g *streamletGatherer) Gather() ([]*dto.MetricFamily, error) {
	byName := map[string]*dto.MetricFamily{}
	var errs []error
	for _, st := range g.streamlets {
		name := st.s.Action.Name
		for _, reg := range []prometheus.Gatherer{st.sc.Registry(), st.metrics.Registry()} {
			mfs, err := reg.Gather()
			if err != nil {
				errs = append(errs, fmt.Errorf("streamlet %s: %w", name, err))
			}
			for _, mf := range mfs {
				out := byName[mf.GetName()]
				if out == nil {
					out = &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type, Unit: mf.Unit}
					byName[mf.GetName()] = out
				}
				for _, m := range mf.GetMetric() {
					if !hasLabel(m, labelStreamlet) { // an action's own metric may have one
						m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(labelStreamlet), Value: proto.String(name)})
						slices.SortFunc(m.Label, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
					}
					out.Metric = append(out.Metric, m)
				}
			}
		}
	}
	mfs := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		mfs = append(mfs, mf)
	}
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return mfs, errors.Join(errs...)
}

func hasLabel(m *dto.Metric, name string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return true
		}
	}
	return false
}
