package conformance

import (
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/stdio"
)

// TestTimeoutZeroIsNone: --timeout 0s means no item timeout in `millrace test`, as in the
// bridge (the kit used to turn 0 into one minute).
func TestTimeoutZeroIsNone(t *testing.T) {
	line, err := bridge.ParseLine(strings.Fields("s --in in=x.v1 --timeout 0s -- prog"))
	if err != nil {
		t.Fatal(err)
	}
	a := Action{Action: *line}
	a.defaults()
	if a.Timeout != 0 {
		t.Errorf("the kit's item timeout of --timeout 0s = %v, want 0 (none)", a.Timeout)
	}
	timer := newItemTimer(a.Timeout)
	defer timer.Stop()
	if timer.C() != nil {
		t.Error("the kit's item timer of --timeout 0s can fire; want none")
	}
}

// TestIdempotencyKeyIsTheBridges: the kit hands the action the key the bridge would for the
// same record (pipeline, streamlet, topic, partition, offset), as the README says.
func TestIdempotencyKeyIsTheBridges(t *testing.T) {
	a := &Action{Action: bridge.Action{Name: "score", Inlets: []bridge.Port{{Name: "in"}}}}
	it := fillItem(a, stdio.Item{}, 7, "")
	if want := bridge.IdempotencyKey(FixtureTopic, "score", FixtureTopic, 0, 7); it.IdempotencyKey != want {
		t.Errorf("idempotencyKey = %s, want the bridge's %s", it.IdempotencyKey, want)
	}
}
