// Package bench holds millrace's end-to-end benchmarks: throughput, latency and memory of the
// whole path (in-process Kafka broker → sidecar → gRPC → bridge → action process and back),
// each beside its ceiling (a native Go streamlet behind the same sidecar, the bridge driven by
// a fake sidecar, the bare pipe loop of the child alone, the broker alone) and beside the
// hand-written confluent-kafka loop a user would write instead (bench/peer/loop.py), measured
// in one run. The benchmarks are in the package's tests; `go test` runs none of them without -bench.
// scripts/bench runs them all and prints the Markdown table of BENCHMARKS.md:
//
//	scripts/bench                 # the full run (about 20 minutes on 2 cores)
//	BENCH_SHORT=1 scripts/bench   # issue 15's rows and the loop, interleaved (about 6 minutes)
//	scripts/bench -quick          # one short run of each, to check the harness
//
// The package has no API.
package bench
