package local

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/ankka-flow/millrace/internal/kafkalog"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lastError keeps the last error a streamlet logged, for the reason of a stall.
type lastError struct {
	mu  sync.Mutex
	msg string
}

func (l *lastError) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.msg == "" {
		return "none logged (run with -v for the logs)"
	}
	return l.msg
}

// teeHandler passes records on to h and remembers the last error-level one.
type teeHandler struct {
	h    slog.Handler
	last *lastError
}

func (t *teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || t.h.Enabled(ctx, l)
}

func (t *teeHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelError {
		var b strings.Builder
		b.WriteString(rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" || a.Key == "stderr" || a.Key == "reason" {
				fmt.Fprintf(&b, "; %s: %v", a.Key, a.Value)
			}
			return true
		})
		t.last.mu.Lock()
		t.last.msg = b.String()
		t.last.mu.Unlock()
	}
	if !t.h.Enabled(ctx, rec.Level) {
		return nil
	}
	return t.h.Handle(ctx, rec)
}

func (t *teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &teeHandler{h: t.h.WithAttrs(as), last: t.last}
}

func (t *teeHandler) WithGroup(name string) slog.Handler {
	return &teeHandler{h: t.h.WithGroup(name), last: t.last}
}

// kafkaLogger is the option that routes a franz-go client's logs to log, tagged with the
// component, at warn and above: at info franz-go logs every connection and metadata refresh,
// which would drown the streamlets' own logs.
func kafkaLogger(log *slog.Logger, component string) kgo.Opt {
	return kafkalog.Option(log.With("component", component), slog.LevelWarn)
}
