package bridge

import (
	"net/http"
	"time"

	"github.com/ankka-flow/millrace/stdio"
)

// RecordActionMetric records one metric line of the action, as the pool's hook does.
func RecordActionMetric(m *Metrics, name string, value float64, labels map[string]string) {
	m.action.record(stdio.Metric{Name: name, Value: value, Labels: labels})
}

const (
	HeaderError           = headerError
	HeaderAttempts        = headerAttempts
	HeaderSourceTopic     = headerSourceTopic
	HeaderSourcePartition = headerSourcePartition
	HeaderSourceOffset    = headerSourceOffset
	HeaderAbstainReason   = headerAbstainReason
)

// WithStateClock makes the bridge wait for a batch's BatchState on after instead of time.After.
func WithStateClock(after func(time.Duration) <-chan time.Time) func(*Options) {
	return func(o *Options) { o.stateAfter = after }
}

// GRPCOptions are the server options the bridge serves with.
var GRPCOptions = grpcOptions

// MetricsHandler is m's /metrics handler.
func MetricsHandler(m *Metrics) http.Handler { return m.handler() }
