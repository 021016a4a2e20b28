package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ankka-flow/millrace/internal/testkit"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// TestNewerStartWinsWhileStarting: a Start on a second stream while the first conversation's
// processes are still starting voids the first, even when the first finishes starting before
// the second: the latest Start is the live conversation, whatever the order of the starts.
func TestNewerStartWinsWhileStarting(t *testing.T) {
	r := startBridge(t, oneOutlet)
	gateDir := t.TempDir()
	fs := testkit.DialProcess(t, r.addr)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()

	startOn := func(id string) *testkit.Stream {
		t.Helper()
		st, err := fs.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		start := &flowv1.Start{ConversationId: id, Pipeline: "pipe", Streamlet: r.action.Name,
			ConfigJson: `{"gate":` + quote(gateDir) + `,"name":"` + id + `"}`,
			Inlets:     []*flowv1.PortBinding{{Port: "in", Topic: "in-topic"}},
			Outlets:    []*flowv1.PortBinding{{Port: "out", Topic: "out-topic"}}}
		if err := st.Start(start); err != nil {
			t.Fatal(err)
		}
		waitFile(t, filepath.Join(gateDir, id+".hello")) // its process is starting
		return st
	}
	older := startOn("older")
	olderEnd := make(chan error, 1)
	go func() {
		for {
			if _, err := older.Recv(); err != nil {
				olderEnd <- err
				return
			}
		}
	}()
	newer := startOn("newer")

	// The older conversation's process finishes starting first.
	release(t, filepath.Join(gateDir, "older.go"))
	var olderErr error
	startedOrEnded := func() bool {
		select {
		case olderErr = <-olderEnd:
			return true
		default:
			return r.events.started("older")
		}
	}
	if !testkit.Eventually(waitLimit, startedOrEnded) {
		t.Fatal("the older conversation neither started nor ended")
	}
	release(t, filepath.Join(gateDir, "newer.go"))

	if err := newer.Batch(&flowv1.Batch{BatchId: 1, Inlet: "in", Records: []*flowv1.InputRecord{rec(0, nil, `{"op":"emits","n":1}`)}}); err != nil {
		t.Fatal(err)
	}
	var got []*flowv1.FromProcess
	for {
		m, err := newer.Recv()
		if err != nil {
			t.Fatalf("the newer stream ended with %v after %v; want the live conversation's Emit and Ack", err, got)
		}
		got = append(got, m)
		if m.GetAck() != nil || m.GetFail() != nil {
			break
		}
	}
	if len(got) != 2 || got[0].GetEmit() == nil || got[1].GetAck().GetBatchId() != 1 {
		t.Errorf("the newer stream got %v; want an Emit and the Ack of batch 1", got)
	}
	if olderErr == nil {
		olderErr = <-olderEnd
	}
	if status.Code(olderErr) != codes.Aborted {
		t.Errorf("the older stream ended with %v; want ABORTED (voided by the newer Start)", olderErr)
	}
	if err := newer.Stop("done"); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := newer.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("the newer stream ended with %v after Stop; want EOF", err)
			}
			break
		}
	}
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func release(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	appeared := func() bool { // polling a file the child writes
		_, err := os.Stat(path)
		return err == nil
	}
	if !testkit.Eventually(waitLimit, appeared) {
		t.Fatalf("%s never appeared", path)
	}
}
