package stdio_test

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/stdio"
)

const validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestParseTraceparent(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{validTP, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},       // a later version, read as 00
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what", true},  // a later version may grow
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what", false}, // version 00 may not
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false},     // growth starts with -
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},      // version ff is invalid
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},      // zero trace-id
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},      // zero parent-id
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", false},      // uppercase
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", false},         // short
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},      // separator
		{"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},      // not hex
		{"", false},
	}
	for _, tt := range tests {
		trace, parent, flags, ok := stdio.ParseTraceparent([]byte(tt.in))
		if ok != tt.ok {
			t.Errorf("ParseTraceparent(%q) ok = %v; want %v", tt.in, ok, tt.ok)
			continue
		}
		if !ok {
			continue
		}
		if got := hex.EncodeToString(trace[:]); got != tt.in[3:35] {
			t.Errorf("ParseTraceparent(%q) trace-id = %s", tt.in, got)
		}
		if got := hex.EncodeToString(parent[:]); got != tt.in[36:52] {
			t.Errorf("ParseTraceparent(%q) parent-id = %s", tt.in, got)
		}
		if want := map[byte]byte{'0': 0, '1': 1}[tt.in[54]]; flags != want {
			t.Errorf("ParseTraceparent(%q) flags = %d; want %d", tt.in, flags, want)
		}
	}
}

// FuzzTraceparent: what parses is written back as the same version-00 value (for version 00
// input: the same bytes), and what is written always parses.
func FuzzTraceparent(f *testing.F) {
	f.Add([]byte(validTP))
	f.Add([]byte("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"))
	f.Add([]byte("00-00000000000000000000000000000000-00f067aa0ba902b7-01"))
	f.Fuzz(func(t *testing.T, v []byte) {
		trace, parent, flags, ok := stdio.ParseTraceparent(v)
		if !ok {
			return
		}
		tc := stdio.TraceContext{TraceID: trace, Flags: flags}
		out := tc.AppendTraceparent(nil, parent)
		if len(out) != stdio.TraceparentLen || !bytes.Equal(out[3:], v[3:stdio.TraceparentLen]) {
			t.Fatalf("ParseTraceparent(%q) written back as %q", v, out)
		}
		if string(v[:2]) == "00" && !bytes.Equal(out, v) {
			t.Fatalf("a version-00 value %q written back as %q", v, out)
		}
		t2, p2, f2, ok := stdio.ParseTraceparent(out)
		if !ok || t2 != trace || p2 != parent || f2 != flags {
			t.Fatalf("ParseTraceparent(%q) of what was written = %x %x %d %v", out, t2, p2, f2, ok)
		}
	})
}

func TestNewIDs(t *testing.T) {
	seen := map[[8]byte]bool{}
	for range 1000 {
		id := stdio.NewSpanID()
		if id == [8]byte{} || seen[id] {
			t.Fatalf("NewSpanID() = %x: zero or repeated", id)
		}
		seen[id] = true
	}
	if a, b := stdio.NewTraceID(), stdio.NewTraceID(); a == b || a == [16]byte{} {
		t.Fatalf("NewTraceID() twice = %x, %x", a, b)
	}
}

// TestAppendItemTrace: an item with a trace context carries the attempt's span as the
// traceparent's parent-id, and its tracestate; the line decodes back into both.
func TestAppendItemTrace(t *testing.T) {
	trace, parent, _, _ := stdio.ParseTraceparent([]byte(validTP))
	it := stdio.Item{Delivery: "d1", ID: "t/0/1", Payload: []byte(`{}`), Attempt: 1, Tracestate: "vendor=1",
		Trace: stdio.TraceContext{TraceID: trace, Parent: parent, SpanID: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, Flags: 1}}
	line := stdio.AppendItem(nil, &it)
	var m stdio.Message
	if err := stdio.DecodeMessage(bytes.TrimSuffix(line, []byte("\n")), &m); err != nil {
		t.Fatal(err)
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01"; m.Traceparent != want || m.Tracestate != "vendor=1" {
		t.Errorf("AppendItem(trace) decoded traceparent %q, tracestate %q; want %q, vendor=1", m.Traceparent, m.Tracestate, want)
	}
	it.Trace = stdio.TraceContext{}
	if line := string(stdio.AppendItem(nil, &it)); strings.Contains(line, "trace") {
		t.Errorf("AppendItem(no trace) = %s; want no trace fields", line)
	}
}
