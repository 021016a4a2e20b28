// Package local is the action author's side of millrace, used only by this binary
// (cmd/millrace): it reads an action directory or a config line for the tools (`millrace test
// action`, `millrace describe`), writes new actions from templates (`millrace init`), and runs
// one or several streamlets on one machine (`millrace run`): an in-process Kafka broker
// (kfake) unless real brokers are named, each streamlet's real bridge and sidecar talking gRPC
// over loopback, the input lines produced as records and every output record printed.
//
// The runner is in one file per job: run.go (Run and its options), supervise.go (each
// streamlet's bridge and sidecar as tasks), watch.go (the end of a run: done, a fault, ctx),
// faults.go (the faults that can only repeat, decided on the bridge's events, and the warnings
// held back while one is in doubt),
// progress.go (the progress line), admin.go (topics, offsets, commits: the Kafka admin
// requests), printer.go (the output records as JSON lines), input.go (input lines to records),
// summary.go (what a run did) and logs.go (the slog tee that keeps a streamlet's last error,
// franz-go's logs through kslog).
package local
