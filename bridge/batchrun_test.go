package bridge_test

import (
	"fmt"
	"strconv"
	"testing"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// TestBatchesOneAfterAnother: batches of changing sizes, an empty one and a failing one
// among them, answered one after another (so that each may reuse the blocks of the one
// before it), each get exactly their own records' emits in record order, then Ack, or Fail
// for the one with a value that is not JSON; nothing of a batch carries over to the next.
func TestBatchesOneAfterAnother(t *testing.T) {
	r := startBridge(t, oneOutlet+" --window 4 --concurrency 2")
	s := dial(t, r.addr)
	s.start(r, "c", 0)
	offset := int64(0)
	for n, size := range []int{5, 1, 0, 3, -2, 8, 2} {
		id := uint64(n + 1)
		bad := size < 0 // a batch whose last record is not JSON: it fails
		size = max(size, -size)
		recs := make([]*flowv1.InputRecord, size)
		for i := range recs {
			v := strconv.FormatInt(offset, 10)
			if bad && i == size-1 {
				v = "not json"
			}
			recs[i] = rec(offset, nil, v)
			offset++
		}
		s.batch(id, 0, recs...)
		a := s.wait(id)
		if bad {
			if a.fail == nil {
				t.Fatalf("batch %d: %v; want Fail for its record that is not JSON", id, a)
			}
			continue
		}
		if !a.ack || len(a.emits) != size {
			t.Fatalf("batch %d: %v; want Ack after %d emits", id, a, size)
		}
		for i, e := range a.emits {
			if got, want := string(e.GetRecord().GetValue()), fmt.Sprint(recs[i].GetOffset()); got != want {
				t.Fatalf("batch %d emit %d = %q; want %q (its own record, in record order)", id, i, got, want)
			}
		}
	}
	expectEOF(t, s.stop())
	s.check()
}
