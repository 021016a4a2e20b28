package e2e_test

import (
	"testing"
	"time"
)

// TestHappyPath runs the Python example (actions/score-listing) over N records: every record
// comes out once.
func TestHappyPath(t *testing.T) {
	b := newBroker(t)
	pl := newPipeline(t, b, scoreListing(), 4)
	pl.start(0)
	pl.produce(pl.records(0, ciN(2000))...)
	pl.waitDone(60 * time.Second)
	tl := pl.tally()
	pl.report("happy path", tl, "")
	tl.check(t)
	if tl.out != tl.in || tl.dup != 0 {
		t.Errorf("tally = %s; want every record out once", tl)
	}
}
