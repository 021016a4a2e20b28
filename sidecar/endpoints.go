package sidecar

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ankka-flow/millrace/internal/httpserve"
)

// listenMetrics opens FLOW_METRICS_ADDR, or returns nil when it is unset.
func (s *Sidecar) listenMetrics() (net.Listener, error) {
	if s.cfg.MetricsAddr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", s.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("sidecar: cannot serve metrics on FLOW_METRICS_ADDR=%s: %w: pick a free address, or unset FLOW_METRICS_ADDR", s.cfg.MetricsAddr, err)
	}
	return lis, nil
}

// serveMetrics serves /metrics, /healthz (200 while the sidecar runs) and /readyz (200 while a
// conversation is live, the readiness file's condition; 503 otherwise) on lis until ctx ends,
// then stops as [httpserve.Serve] does and closes lis. It returns when the server has ended.
func (s *Sidecar) serveMetrics(ctx context.Context, lis net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if p := s.denial.Load(); p != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", p)
			return
		}
		if !s.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: no live conversation with the process")
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if err := httpserve.Serve(ctx, lis, mux); err != nil {
		s.log.Error("the metrics server stopped", "address", lis.Addr().String(), "error", err)
	}
}
