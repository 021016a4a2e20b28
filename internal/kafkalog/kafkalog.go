// Package kafkalog routes a franz-go client's logs into log/slog through franz-go's own
// plugin/kslog, at a floor level: at info franz-go logs every connection and metadata refresh,
// which would drown the logs of the program around it.
package kafkalog

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// Option is the client option that sends the client's records of level min and above to log.
func Option(log *slog.Logger, min slog.Level) kgo.Opt {
	return kgo.WithLogger(kslog.New(slog.New(minLevel{log.Handler(), min})))
}

// minLevel passes on the records of h at min and above.
type minLevel struct {
	h   slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.h.Enabled(ctx, l)
}

func (m minLevel) Handle(ctx context.Context, rec slog.Record) error { return m.h.Handle(ctx, rec) }

func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{m.h.WithAttrs(as), m.min}
}

func (m minLevel) WithGroup(name string) slog.Handler { return minLevel{m.h.WithGroup(name), m.min} }
