package testkit

import (
	"context"
	"log/slog"
	"sync"
)

// Logs is a slog.Handler that keeps every record with its attributes as typed values, so a
// test asserts on an error's chain rather than on log text. With Next set (a text handler for
// the failure output), the records are passed on to it and only its levels are enabled.
type Logs struct {
	Next slog.Handler

	mu      *sync.Mutex
	records *[]slog.Record
	attrs   []slog.Attr
}

// NewLogs returns an empty Logs passing records on to next (nil: none).
func NewLogs(next slog.Handler) *Logs {
	return &Logs{Next: next, mu: &sync.Mutex{}, records: new([]slog.Record)}
}

func (l *Logs) Enabled(ctx context.Context, level slog.Level) bool {
	return l.Next == nil || l.Next.Enabled(ctx, level)
}

func (l *Logs) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(l.attrs...)
	l.mu.Lock()
	*l.records = append(*l.records, r)
	l.mu.Unlock()
	if l.Next != nil {
		return l.Next.Handle(ctx, r)
	}
	return nil
}

func (l *Logs) WithAttrs(as []slog.Attr) slog.Handler {
	c := *l
	c.attrs = append(append([]slog.Attr(nil), l.attrs...), as...)
	return &c
}

// WithGroup keeps the records' attributes flat: the tests look them up by key.
func (l *Logs) WithGroup(string) slog.Handler { return l }

// Errors returns the values of the "error" attribute of the records with message msg (""
// for every record), in order, as errors (a value that is not an error is left out), for a
// test to decide on with errors.Is and errors.As.
func (l *Logs) Errors(msg string) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []error
	for _, r := range *l.records {
		if msg != "" && r.Message != msg {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if err, ok := a.Value.Any().(error); ok && a.Key == "error" {
				out = append(out, err)
			}
			return true
		})
	}
	return out
}

// Attrs returns the attributes of each record with message msg, in order, by key, as typed
// values (an int logged is an int64, a string a string).
func (l *Logs) Attrs(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, r := range *l.records {
		if r.Message != msg {
			continue
		}
		m := map[string]any{}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.Resolve().Any()
			return true
		})
		out = append(out, m)
	}
	return out
}
