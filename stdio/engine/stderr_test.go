package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// runStderrTagsChild declares a window of 4 and, for each item, logs a plain stderr line and a
// JSON line naming its own delivery, item and attempt (as the SDKs do), then echoes it.
func runStderrTagsChild(c *child) int {
	if hello, ok := c.next(); !ok || hello.Type != stdio.TypeHello {
		return 8
	}
	c.send(stdio.Message{Type: stdio.TypeReady, Window: 4})
	for {
		m, ok := c.next()
		if !ok || m.Type == stdio.TypeShutdown {
			return 0
		}
		if m.Type != stdio.TypeItem {
			continue
		}
		fmt.Fprintln(os.Stderr, "plain words")
		fmt.Fprintf(os.Stderr, `{"level":"info","msg":"tagged","delivery":%q,"item":%q,"attempt":%d}`+"\n", m.Delivery, m.ID, m.Attempt)
		c.echo(m)
	}
}

// lockedBuffer is a bytes.Buffer a logger may write while the test reads it.
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

// TestStderrTags: with a window, a stderr line the action tagged itself keeps its own delivery,
// item and attempt, once (the engine adds none), and a plain line gets none, since the engine
// cannot tell which delivery in flight wrote it; Hooks.Stderr is told both lines alike.
func TestStderrTags(t *testing.T) {
	var out lockedBuffer
	var hookMu sync.Mutex
	var hooked []engine.StderrLine
	p, err := engine.Start(context.Background(), config("stderrtags", func(c *engine.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&out, nil))
		c.Hooks.Stderr = func(l engine.StderrLine) {
			hookMu.Lock()
			hooked = append(hooked, l)
			hookMu.Unlock()
		}
	}))
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	r := run(t, p, item("it-t", `1`))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.Close(ctx, false) // the process exits, its stderr read to the end
	if r.Outcome != engine.Done {
		t.Fatalf("result = %v %v", r.Outcome, r.Err)
	}
	// How a child's stderr line reads in the log, its attributes once each, is the product.
	var tagged, plain string
	for _, l := range strings.Split(out.String(), "\n") {
		switch {
		case strings.Contains(l, "msg=tagged"):
			tagged = l
		case strings.Contains(l, `line="plain words"`):
			plain = l
		}
	}
	if tagged == "" || plain == "" {
		t.Fatalf("logged:\n%s\nwant the tagged and the plain line", out.String())
	}
	for _, k := range []string{"delivery=", "item=", "attempt="} {
		if n := strings.Count(tagged, " "+k); n != 1 {
			t.Errorf("tagged line has %s %d times, want once: %s", k, n, tagged)
		}
		if strings.Contains(plain, " "+k) {
			t.Errorf("plain line from a windowed action has %s (a guess): %s", k, plain)
		}
	}
	if !strings.Contains(tagged, "item=it-t") || !strings.Contains(tagged, "attempt=1") {
		t.Errorf("tagged line lost the action's tags: %s", tagged)
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if len(hooked) != 2 {
		t.Fatalf("Hooks.Stderr told %+v; want the plain and the tagged line", hooked)
	}
	for _, l := range hooked {
		switch {
		case l.Line == "plain words" && l.Item == "" && l.Attempt == 0 && l.PID != 0:
		case strings.Contains(l.Line, `"msg":"tagged"`) && l.Item == "it-t" && l.Attempt == 1 && l.Delivery != "":
		default:
			t.Errorf("Hooks.Stderr told %+v; want the plain line untagged, the tagged one with item it-t, attempt 1", l)
		}
	}
}
