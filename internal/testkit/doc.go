// Package testkit is what millrace's tests share: the Kafka broker of a test (kfake in the
// test process, or the real cluster MILLRACE_KAFKA_BROKERS names), the fake sidecar that drives
// a streamlet process over gRPC, the fake streamlet process a sidecar drives (Streamlet), the test binary playing a child process (TestMain), a process
// under test with its log (StartProc, for the e2e suite and the benchmarks), a wait on a
// condition only a poll can see (Eventually), a buffer safe for concurrent logs, a slog handler
// that keeps typed records and a raw Python action that answers as a test says
// (PythonAnswerer). Only tests import it.
package testkit
