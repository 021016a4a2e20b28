package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-json"
)

// stderr capture limits.
const (
	stderrLineMax = 64 << 10 // longer stderr lines are logged truncated
	tailLines     = 10       // stderr lines kept for error messages
	tailLineMax   = 300      // bytes kept of each
)

// readStderr logs every stderr line and keeps the last ones, until stderr ends.
func (pr *process) readStderr(stderr io.Reader) {
	<-pr.begin
	br := bufio.NewReaderSize(stderr, stderrLineMax)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			pr.logStderr(line, true)
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				return
			}
			continue
		}
		if len(line) > 0 {
			pr.logStderr(bytes.TrimRight(line, "\r\n"), false)
		}
		if err != nil {
			return
		}
	}
}

func (pr *process) logStderr(line []byte, truncated bool) {
	kept := line
	if len(kept) > tailLineMax {
		kept = kept[:tailLineMax]
	}
	pr.tailMu.Lock()
	if len(pr.tail) == tailLines {
		copy(pr.tail, pr.tail[1:])
		pr.tail = pr.tail[:tailLines-1]
	}
	pr.tail = append(pr.tail, string(kept))
	pr.tailMu.Unlock()

	ctx := context.Background()
	level := slog.LevelInfo
	var fields map[string]any
	if len(line) > 0 && line[0] == '{' && json.Unmarshal(line, &fields) == nil {
		if s, ok := fields["level"].(string); ok {
			_ = level.UnmarshalText([]byte(strings.ToUpper(s)))
			delete(fields, "level")
		}
	} else {
		fields = nil
	}
	if h := pr.pool.cfg.Hooks.Stderr; h != nil {
		h(pr.stderrLine(line, fields))
	}
	if !pr.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8+len(fields))
	if !taggedByAction(fields) {
		attrs = pr.appendDelivery(attrs)
	}
	msg := "action stderr"
	if fields != nil {
		for _, k := range []string{"msg", "message"} {
			if s, ok := fields[k].(string); ok {
				msg = s
				delete(fields, k)
				break
			}
		}
		delete(fields, "time")
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			attrs = append(attrs, slog.Any(k, fields[k]))
		}
	} else {
		attrs = append(attrs, slog.String("line", string(line)))
	}
	if truncated {
		attrs = append(attrs, slog.Bool("truncated", true), slog.Int("max_bytes", stderrLineMax))
	}
	pr.log.LogAttrs(ctx, level, msg, attrs...)
}

// taggedByAction reports whether a JSON stderr line names its delivery itself (as the SDKs'
// log lines do): the engine then adds none of its own, which would only repeat or contradict
// the action's.
func taggedByAction(fields map[string]any) bool {
	for _, k := range []string{"delivery", "item", "attempt"} {
		if _, ok := fields[k]; ok {
			return true
		}
	}
	return false
}

// appendDelivery adds the delivery a stderr line belongs to, when the engine can tell: with
// one delivery at a time it is the one in flight, else the last one (stderr is read apart from
// stdout, so a line written during a delivery may arrive after its answer). With a window the
// line could belong to any delivery in flight, so it gets none rather than a guess.
func (pr *process) appendDelivery(attrs []slog.Attr) []slog.Attr {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	var cur *task
	for _, t := range pr.inflight {
		if cur == nil || t.seq < cur.seq {
			cur = t
		}
	}
	// pr.window is read only once a delivery was written (under pr.mu), which happens after
	// ready settled it.
	switch {
	case cur == nil && pr.last.delivery == "", pr.window > 1:
		return attrs
	case cur != nil:
		return append(attrs, slog.String("delivery", cur.item.Delivery), slog.String("item", cur.item.ID), slog.Int("attempt", cur.item.Attempt))
	}
	return append(attrs, slog.String("delivery", pr.last.delivery), slog.String("item", pr.last.item), slog.Int("attempt", pr.last.attempt))
}

// StderrLine is one stderr line of a process, for [Hooks].Stderr.
type StderrLine struct {
	PID      int
	Line     string
	Delivery string // the delivery in flight (or the last one), "" when the engine cannot tell
	Item     string // its item's id
	Attempt  int
}

// stderrLine is line with the delivery it belongs to: as the action tagged it (a JSON line
// with delivery, item or attempt, as the SDKs' item logs), else as appendDelivery tells it.
func (pr *process) stderrLine(line []byte, fields map[string]any) StderrLine {
	l := StderrLine{PID: pr.pid, Line: string(line)}
	if taggedByAction(fields) {
		l.Delivery, _ = fields["delivery"].(string)
		l.Item, _ = fields["item"].(string)
		if n, ok := fields["attempt"].(float64); ok {
			l.Attempt = int(n)
		}
		return l
	}
	for _, a := range pr.appendDelivery(nil) {
		switch a.Key {
		case "delivery":
			l.Delivery = a.Value.String()
		case "item":
			l.Item = a.Value.String()
		case "attempt":
			l.Attempt = int(a.Value.Int64())
		}
	}
	return l
}

// tailText quotes the last stderr lines for an error message.
func (pr *process) tailText() string {
	pr.tailMu.Lock()
	defer pr.tailMu.Unlock()
	if len(pr.tail) == 0 {
		return "stderr was empty"
	}
	var b strings.Builder
	b.WriteString("last stderr lines: ")
	for i, l := range pr.tail {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(strconv.Quote(l))
	}
	return b.String()
}
