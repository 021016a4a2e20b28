// Package bench holds millrace's end-to-end benchmarks: throughput, latency and memory of the
// whole path (in-process Kafka broker → sidecar → gRPC → bridge → action process and back),
// each beside its ceiling (a native Go streamlet behind the same sidecar, the bridge driven by
// a fake sidecar, the bare pipe loop of the child alone, the broker alone) and beside the
// hand-written confluent-kafka loop a user would write instead (bench/peer/loop.py), measured
// in one run. BenchmarkActions runs the actions as their authors do, each at its defaults
// (each SDK's echo, go-echo, two raw scripts that declare nothing, the native streamlet), in
// the deployed shape: the sidecar and the bridge each a process, with the CPU per record of
// the sidecar, of the bridge and of the bridge's child measured apart from /proc;
// BenchmarkState sets a running count per key (bench/statecount, bench/testdata/count.py)
// beside the same echo without state, in the same shape, to show what state costs a record.
// The benchmarks are in the package's tests; `go test` runs none of them without -bench.
// scripts/bench runs them and prints the Markdown tables of BENCHMARKS.md, with the targets
// checked against the loop of the same run:
//
//	scripts/bench                 # the full run (about 37 minutes on 2 cores)
//	BENCH_SHORT=1 scripts/bench   # the loop and BenchmarkActions only, 3 interleaved rounds of
//	                              # 50,000 records a row (about 7–10 minutes on 2 cores, 15 at most)
//	BENCH_STATE=1 scripts/bench   # the state per key only: BenchmarkState and the restores
//	                              # of sidecar/internal/state (about 7 minutes on 2 cores)
//	scripts/bench -quick          # one short run of each, to check the harness
//
// The package has no API.
package bench
