package sidecar

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsShutdownTimeout bounds the metrics server's graceful stop.
const metricsShutdownTimeout = 5 * time.Second

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
// conversation is live, the readiness file's condition; 503 otherwise) on lis until stop is
// closed, then shuts the server down and closes lis. It returns when the server has ended.
func (s *Sidecar) serveMetrics(lis net.Listener, stop <-chan struct{}) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !s.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: no live conversation with the process")
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		s.log.Error("the metrics server stopped", "address", lis.Addr().String(), "error", err)
		return
	case <-stop:
	}
	ctx, cancel := context.WithTimeout(context.Background(), metricsShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
	<-served
}
