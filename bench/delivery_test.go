package bench_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/sidecar"
)

// BenchmarkDelivery is the cost of exactly once: the same pipelines with the sidecar at
// FLOW_DELIVERY=at-least-once and exactly-once, on 1 and 8 partitions, read by a
// read_committed consumer. "flow" is throughput (as BenchmarkE2E: records/s, the Go echo
// action through the bridge with one process and a window of 64, and the native Go
// streamlet); "quiet" is the latency of a quiet stream (as BenchmarkLatency: one record at a
// time, p50 and p99 in ms, the records spread over the partitions in turn).
//
//	go test -run '^$' -bench 'BenchmarkDelivery' -benchtime 3x ./bench/
func BenchmarkDelivery(b *testing.B) {
	_, goEcho := binaries(b)
	type streamlet struct {
		name  string
		serve func(b testing.TB, a *actionconf.Action) func(context.Context, net.Listener) error
		argv  []string
	}
	ss := []streamlet{
		{"go", serveBridge, []string{goEcho}},
		{"native", func(_ testing.TB, a *actionconf.Action) func(context.Context, net.Listener) error {
			return serveNative(a)
		}, []string{"native"}},
	}
	for _, d := range []sidecar.Delivery{sidecar.AtLeastOnce, sidecar.ExactlyOnce} {
		for _, s := range ss {
			for _, parts := range partitionsOf {
				start := func(b *testing.B) (*broker, *pipeline) {
					br := newBroker(b)
					a := parseAction(b, actionLine(s.argv, 1, 64))
					return br, startPipelineAs(b, br, a, parts, batchLimits{}, s.serve(b, a), d)
				}
				b.Run(fmt.Sprintf("%s/%s/flow/p%d", d, s.name, parts), func(b *testing.B) {
					br, p := start(b)
					benchFlow(b, br, p.in, p.out, parts, nil)
				})
				b.Run(fmt.Sprintf("%s/%s/quiet/p%d", d, s.name, parts), func(b *testing.B) {
					br, p := start(b)
					quiet(b, br, p, parts)
				})
			}
		}
	}
}

// quiet measures the latency of records produced one at a time, each waited for on the
// outlet, over the partitions in turn; it reports p50 and p99 in ms.
func quiet(b *testing.B, br *broker, p *pipeline, parts int) {
	prod := br.producer(b)
	cnt := br.counter(b, p.out)
	ctx := context.Background()
	one := func(i int) time.Duration {
		start := time.Now()
		r := &kgo.Record{Topic: p.in, Partition: int32(i % parts), Value: value(i, valueSize)}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			b.Fatal(err)
		}
		if err := cnt.waitFor(i+1, time.Minute); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for i := range 20 { // warm-up: the group joins, the process starts
		one(i)
	}
	i := 20
	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, one(i))
		i++
	}
	b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 99)), "p99-ms")
}
