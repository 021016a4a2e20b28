package conformance

import (
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/stdio"
)

// TestTimeoutZeroIsNone: --timeout 0s means no item timeout in `millrace test`, as in the
// bridge (the kit used to turn 0 into one minute).
func TestTimeoutZeroIsNone(t *testing.T) {
	line, err := actionconf.ParseLine(strings.Fields("s --in in=x.v1 --timeout 0s -- prog"))
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
	a := &Action{Action: actionconf.Action{Name: "score", Inlets: []actionconf.Port{{Name: "in"}}}}
	it := fillItem(a, stdio.Item{}, 7, "")
	if want := actionconf.IdempotencyKey(FixtureTopic, "score", FixtureTopic, 0, 7); it.IdempotencyKey != want {
		t.Errorf("idempotencyKey = %s, want the bridge's %s", it.IdempotencyKey, want)
	}
}

// TestFillFillsTheLine: the batch check's envelope at the limit is one line of exactly the
// limit, as the engine may write it.
func TestFillFillsTheLine(t *testing.T) {
	a := &Action{Action: actionconf.Action{Name: "score", Inlets: []actionconf.Port{{Name: "in"}}}}
	r := newRunner(t.Context(), a, Options{}, t.TempDir(), nil)
	s := &session{r: r, owner: CheckBatch}
	key := "clé"
	ex := fillItem(a, stdio.Item{Key: &key, Payload: []byte(`{"text":"naïve"}`)}, 7, "")
	for _, limit := range []int{4096, stdio.MaxLineBytes} {
		p := stdio.Packer{Max: limit}
		for _, it := range s.fill(ex, limitItems, limit) {
			p.AppendItem(&it)
		}
		out := p.Bytes()
		if n := strings.Count(string(out), "\n"); n != 1 || len(out) != limit+1 {
			t.Errorf("fill(%d items, limit %d) packs into %d lines of %d bytes; want one line of %d", limitItems, limit, n, len(out), limit+1)
		}
		var m stdio.Message
		if err := stdio.DecodeMessage(out[:len(out)-1], &m); err != nil || m.Type != stdio.TypeBatch {
			t.Errorf("fill(limit %d): the envelope decodes as %q, %v", limit, m.Type, err)
		}
	}
}
