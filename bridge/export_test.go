package bridge

import (
	"net/http"

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

// GRPCOptions are the server options the bridge serves with.
var GRPCOptions = grpcOptions

// MetricsHandler is m's /metrics handler.
func MetricsHandler(m *Metrics) http.Handler { return m.handler() }
