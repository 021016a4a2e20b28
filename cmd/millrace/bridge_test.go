package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

type lockedBuffer = testkit.SyncBuffer

// TestBridgeCommand runs `millrace bridge --config actions/score-listing/action.conf` (a Python
// action) and drives it as the sidecar would: discovery, Start, one batch, Stop, then SIGTERM.
func TestBridgeCommand(t *testing.T) {
	testkit.NeedTools(t, "python3") // actions/score-listing
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	stderr := &lockedBuffer{}
	e := &env{stdout: &bytes.Buffer{}, stderr: stderr, getenv: func(k string) string {
		if k == "FLOW_PROCESS_PORT" {
			return port
		}
		return ""
	}}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() {
		code <- dispatch(ctx, e, []string{"bridge", "--config", "../../actions/score-listing/action.conf"})
	}()
	defer func() {
		cancel()
		select {
		case c := <-code:
			if c != 0 {
				t.Errorf("millrace bridge exited %d; want 0 after SIGTERM\n%s", c, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("millrace bridge did not stop")
		}
	}()

	fs := testkit.DialProcess(t, "127.0.0.1:"+port)
	spec, err := fs.Discover(ctx, &flowv1.SidecarInfo{ProtocolVersion: protocol.Version}) // waits for the bridge to listen
	if err != nil {
		t.Fatalf("Discover = %v\n%s", err, stderr.String())
	}
	if probs := protocol.Validate(spec); len(probs) > 0 || spec.GetStreamlet().GetName() != "score-listing" {
		t.Fatalf("Discover = %v, problems %v; want a valid score-listing", spec, probs)
	}
	config, probs := protocol.ResolveConfig(spec.GetStreamlet().GetConfigParameters(), nil)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	stream, err := fs.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	check(stream.Start(&flowv1.Start{ConversationId: "c1", Pipeline: "p", Streamlet: "score-listing",
		ConfigJson: string(config), Inlets: testkit.Bind(spec.GetStreamlet().GetInlets()), Outlets: testkit.Bind(spec.GetStreamlet().GetOutlets()), MaxMessageBytes: 4 << 20}))
	listing := func(offset int64, v string) *flowv1.InputRecord {
		return &flowv1.InputRecord{Offset: offset, Record: &flowv1.Record{Key: []byte("l"), Value: []byte(v)}}
	}
	check(stream.Batch(&flowv1.Batch{BatchId: 1, Inlet: "listings", Records: []*flowv1.InputRecord{
		listing(0, `{"id": "l-1", "rooms": 3, "surface_m2": 70, "price_eur": 250000, "city": "Lyon", "age_hours": 10}`),
		listing(1, `{"id": "l-3", "rooms": 4, "price_eur": 410000, "city": "Nantes"}`),
	}}))
	check(stream.Stop("test"))
	var got []string
	for {
		m, err := stream.Recv()
		if err != nil {
			break
		}
		switch m := m.GetMessage().(type) {
		case *flowv1.FromProcess_Emit:
			var v map[string]any
			_ = json.Unmarshal(m.Emit.GetRecord().GetValue(), &v)
			got = append(got, "emit "+m.Emit.GetOutlet())
		case *flowv1.FromProcess_Ack:
			got = append(got, "ack")
		case *flowv1.FromProcess_Fail:
			got = append(got, "fail "+m.Fail.GetError().GetMessage())
		}
	}
	if strings.Join(got, ", ") != "emit scores, emit unsure, ack" {
		t.Errorf("answers = %q; want a score, the abstained listing on unsure, then Ack\n%s", got, stderr.String())
	}
	// The deployed bridge logs JSON lines for a log collector: the format is the product.
	if !strings.Contains(stderr.String(), `"msg":"serving"`) {
		t.Errorf("stderr lacks the JSON log line of serving:\n%s", stderr.String())
	}
}
