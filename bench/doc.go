// Package bench holds millrace's end-to-end benchmarks: throughput, latency and memory of the
// whole path (in-process Kafka broker → sidecar → gRPC → bridge → action process and back),
// each beside its ceiling (a native Go streamlet behind the same sidecar, the bridge driven by
// a fake sidecar, the bare pipe loop of the child alone, the broker alone), measured in one
// run. The benchmarks are in the package's tests; `go test` runs none of them without -bench.
// scripts/bench runs them all and prints the Markdown table of BENCHMARKS.md:
//
//	scripts/bench            # the full run (about 6 minutes on 2 cores)
//	scripts/bench -quick     # one short run of each, to check the harness
//
// The package has no API.
package bench
