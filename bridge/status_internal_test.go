package bridge

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// TestStartErrorKeepsItsChain: a conversation whose processes cannot start ends the stream as
// UNAVAILABLE, and the error keeps the engine's cause, so a caller can tell why with errors.Is.
func TestStartErrorKeepsItsChain(t *testing.T) {
	a, err := actionconf.ParseLine(strings.Fields("s --in in=x.v1 -- /nonexistent/millrace-test-program"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(Options{Action: a})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.start(context.Background(), nil, &flowv1.Start{ConversationId: "c1", Streamlet: "s"})
	if err == nil {
		t.Fatal("start of a program that does not exist succeeded")
	}
	if !errors.Is(err, engine.ErrStart) {
		t.Errorf("errors.Is(%v, engine.ErrStart) = false: the cause was flattened", err)
	}
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "did not start") {
		t.Errorf("status = %v %q, want Unavailable naming the start", st.Code(), st.Message())
	}
}
