package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBridgeCommand runs `millrace bridge --config actions/score-listing/action.conf` (a Python
// action) and drives it as the sidecar would: discovery, Start, one batch, Stop, then SIGTERM.
func TestBridgeCommand(t *testing.T) {
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

	conn, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var spec *flowv1.Spec
	for i := 0; ; i++ { // the sidecar's discovery retry
		spec, err = flowv1.NewDiscoveryClient(conn).Discover(ctx, &flowv1.SidecarInfo{ProtocolVersion: protocol.Version})
		if err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("Discover = %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if probs := protocol.Validate(spec); len(probs) > 0 || spec.GetStreamlet().GetName() != "score-listing" {
		t.Fatalf("Discover = %v, problems %v; want a valid score-listing", spec, probs)
	}
	config, probs := protocol.ResolveConfig(spec.GetStreamlet().GetConfigParameters(), nil)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	stream, err := flowv1.NewStreamletClient(conn).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bind := func(ports []*flowv1.Port) (b []*flowv1.PortBinding) {
		for _, p := range ports {
			b = append(b, &flowv1.PortBinding{Port: p.GetName(), Topic: p.GetName()})
		}
		return b
	}
	send := func(m *flowv1.ToProcess) {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Start{Start: &flowv1.Start{ConversationId: "c1", Pipeline: "p", Streamlet: "score-listing",
		ConfigJson: string(config), Inlets: bind(spec.GetStreamlet().GetInlets()), Outlets: bind(spec.GetStreamlet().GetOutlets()), MaxMessageBytes: 4 << 20}}})
	listing := func(offset int64, v string) *flowv1.InputRecord {
		return &flowv1.InputRecord{Offset: offset, Record: &flowv1.Record{Key: []byte("l"), Value: []byte(v)}}
	}
	send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Batch{Batch: &flowv1.Batch{BatchId: 1, Inlet: "listings", Records: []*flowv1.InputRecord{
		listing(0, `{"id": "l-1", "rooms": 3, "surface_m2": 70, "price_eur": 250000, "city": "Lyon", "age_hours": 10}`),
		listing(1, `{"id": "l-3", "rooms": 4, "price_eur": 410000, "city": "Nantes"}`),
	}}}})
	send(&flowv1.ToProcess{Message: &flowv1.ToProcess_Stop{Stop: &flowv1.Stop{Reason: "test"}}})
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
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
	if !strings.Contains(stderr.String(), `"msg":"serving"`) {
		t.Errorf("stderr lacks the JSON log line of serving:\n%s", stderr.String())
	}
}
