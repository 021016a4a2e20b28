package bridge

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// sentStream is the server side of a Run stream that keeps what is sent on it, described at
// once as a real stream encodes it at once ("emit:VALUE", "ack", "fail"): the sender may
// reuse a message once Send returns.
type sentStream struct {
	grpc.ServerStream
	sent []string
}

func (s *sentStream) Recv() (*flowv1.ToProcess, error) { return nil, errors.New("nothing to receive") }

func (s *sentStream) Send(m *flowv1.FromProcess) error {
	switch {
	case m.GetEmit() != nil:
		v := string(m.GetEmit().GetRecord().GetValue())
		if len(v) > 8 {
			v = v[:8]
		}
		s.sent = append(s.sent, "emit:"+v)
	case m.GetAck() != nil:
		s.sent = append(s.sent, "ack")
	case m.GetFail() != nil:
		s.sent = append(s.sent, "fail")
	}
	return nil
}

func (s *sentStream) kinds() string { return strings.Join(s.sent, " ") }

// TestOutputSentInRuns: a batch's settled output is gathered and sent in runs of flushBytes
// and with the batch's last message, not record by record; once a record fails for good,
// nothing more of the batch is sent but its Fail. The results come in out of order, as the
// pool's processes finish them.
func TestOutputSentInRuns(t *testing.T) {
	a, err := actionconf.ParseLine(strings.Fields("t --in in=x.v1 --out out=y.v1 -- prog"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(Options{Action: a})
	if err != nil {
		t.Fatal(err)
	}
	big := `"` + strings.Repeat("b", 40<<10) + `"` // two of them pass flushBytes
	done := func(v string) engine.Result {
		return engine.Result{Outcome: engine.Done, Attempts: 1, Emits: []stdio.Emit{{Payload: []byte(v)}}}
	}
	failed := engine.Result{Outcome: engine.Failed, Attempts: 1, Err: errors.New("it broke")}
	for _, tc := range []struct {
		name    string
		results []engine.Result
		order   []int    // the order the results finish in
		after   []string // what has been sent after each
	}{
		{"small: all with the Ack", []engine.Result{done("1"), done("2"), done("3")}, []int{2, 0, 1},
			[]string{"", "", "emit:1 emit:2 emit:3 ack"}},
		{"large: a run once past flushBytes", []engine.Result{done(big), done(big), done(big)}, []int{0, 1, 2},
			[]string{"", `emit:"bbbbbbb emit:"bbbbbbb`, `emit:"bbbbbbb emit:"bbbbbbb emit:"bbbbbbb ack`}},
		{"a failure drops what was gathered", []engine.Result{done("1"), failed, done("3")}, []int{0, 1, 2},
			[]string{"", "", "fail"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &sentStream{}
			c := &conversation{s: s, id: "c", start: &flowv1.Start{Pipeline: "p"}, stream: st,
				outlets: map[string]string{"out": "out-topic"}, maxBytes: 4 << 20, inFlight: map[uint64]bool{}, log: slog.New(slog.DiscardHandler)}
			b := &flowv1.Batch{BatchId: 7, Inlet: "in", Partition: 0}
			for i := range tc.results {
				b.Records = append(b.Records, &flowv1.InputRecord{Offset: int64(i), Record: &flowv1.Record{Value: []byte("{}")}})
			}
			c.batches.Add(1)
			r := &batchRun{c: c, b: b, topic: "in-topic", sending: true, batchBlocks: getBlocks(len(b.Records))}
			for step, i := range tc.order {
				r.finished(i, tc.results[i])
				if got := st.kinds(); got != tc.after[step] {
					t.Fatalf("after record %d finished (step %d), sent %q; want %q", i, step+1, got, tc.after[step])
				}
			}
		})
	}
}
