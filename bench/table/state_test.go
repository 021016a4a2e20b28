package main

import (
	"strings"
	"testing"
)

// TestStateRows checks the State per key table: each stateful row beside its stateless one,
// with the ratio of their rates and the CPU a record state adds; a mode the run did not
// measure has no rows.
func TestStateRows(t *testing.T) {
	r := results{
		"State/at-least-once/go/stateless/p1": {"records/s": 40000, "sidecar-cpu-µs/rec": 10, "bridge-cpu-µs/rec": 10, "child-cpu-µs/rec": 5, "keys": 1000},
		"State/at-least-once/go/stateful/p1":  {"records/s": 30000, "sidecar-cpu-µs/rec": 14, "bridge-cpu-µs/rec": 12.5, "child-cpu-µs/rec": 6, "keys": 1000},
		"State/at-least-once/go/stateful/p8":  {"records/s": 20000, "sidecar-cpu-µs/rec": 14, "bridge-cpu-µs/rec": 12.5, "child-cpu-µs/rec": 6, "keys": 1000},
	}
	var b strings.Builder
	stateRows(&b, r)
	out := b.String()
	for _, want := range []string{
		"keyed over 1,000 distinct keys",
		"| go-echo (Go SDK) | at-least-once | 1 | 40,000 | 1.00× | 10.0 | 10.0 | 5.0 | 25.0 | – |",
		"| `bench/statecount`: go-echo + a count per key (Go SDK) | at-least-once | 1 | 30,000 | 0.75× | 14.0 | 12.5 | 6.0 | 32.5 | +7.5 |",
		"| go-echo (Go SDK) | at-least-once | 8 | – | – | – | – | – | – | – |",
		"| `bench/statecount`: go-echo + a count per key (Go SDK) | at-least-once | 8 | 20,000 | – | 14.0 | 12.5 | 6.0 | 32.5 | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stateRows wrote\n%s\nwant it to hold %q", out, want)
		}
	}
	for _, unwanted := range []string{"exactly-once", "Python SDK echo |"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("stateRows wrote\n%s\nwith %q, which the run did not measure", out, unwanted)
		}
	}
	b.Reset()
	stateRows(&b, results{"StateRestore/full/keys=10000": {"records/s": 1}})
	if b.Len() != 0 {
		t.Errorf("with no BenchmarkState rows, stateRows wrote\n%s\nwant nothing", b.String())
	}
}

// TestRestoreRows checks the restore table: kfake before Kafka, full before catch-up, fewer
// keys first, the time from ns/op.
func TestRestoreRows(t *testing.T) {
	r := results{
		"StateRestore/catch-up/keys=1000000":   {"ns/op": 52e6, "records/s": 192494, "file-bytes": 391e6, "heap-growth-MiB": 26},
		"StateRestore/full/keys=1000000":       {"ns/op": 3.43e9, "records/s": 294263, "file-bytes": 391e6, "heap-growth-MiB": 569},
		"StateRestore/full/keys=100000":        {"ns/op": 0.4e9, "records/s": 275000, "file-bytes": 39e6, "heap-growth-MiB": 60},
		"StateRestore/kafka/full/keys=1000000": {"ns/op": 5e9, "records/s": 202000},
		"State/at-least-once/go/stateful/p1":   {"records/s": 30000},
	}
	var b strings.Builder
	restoreRows(&b, r)
	out := b.String()
	rows := []string{
		"| full restore, 100,000 keys | kfake | 400 ms | 275,000 | 39 MB | 60 MiB |",
		"| full restore, 1,000,000 keys | kfake | 3.43 s | 294,263 | 391 MB | 569 MiB |",
		"| catch-up of 10,000 records on the file of 1,000,000 keys | kfake | 52 ms | 192,494 | 391 MB | 26 MiB |",
		"| full restore, 1,000,000 keys | Kafka | 5.00 s | 202,000 | – | – |",
	}
	at := -1
	for _, want := range rows {
		i := strings.Index(out, want)
		if i < 0 {
			t.Errorf("restoreRows wrote\n%s\nwant it to hold %q", out, want)
			continue
		}
		if i < at {
			t.Errorf("restoreRows wrote %q before the row above it in\n%s", want, out)
		}
		at = i
	}
	b.Reset()
	restoreRows(&b, results{"State/at-least-once/go/stateful/p1": {"records/s": 1}})
	if b.Len() != 0 {
		t.Errorf("with no BenchmarkStateRestore rows, restoreRows wrote\n%s\nwant nothing", b.String())
	}
}
