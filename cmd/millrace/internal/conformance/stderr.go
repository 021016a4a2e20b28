package conformance

import (
	"errors"
	"io"
	"strings"
	"sync"

	"github.com/ankka-flow/millrace/stdio"
)

// stderrLog reads the action's stderr to the end, always, so a chatty action never blocks on
// a full pipe; it counts lines and bytes, keeps the last few lines for error messages, and
// notes lines over max.
type stderrLog struct {
	max     int
	mu      sync.Mutex
	lines   int
	bytes   int64
	tooLong int
	last    []string
}

const keepStderr = 6

func (l *stderrLog) read(r io.Reader) {
	lr := stdio.NewLineReader(r, l.max)
	for {
		line, err := lr.ReadLine()
		l.mu.Lock()
		switch {
		case err == nil || errors.Is(err, io.ErrUnexpectedEOF):
			l.lines++
			l.bytes += int64(len(line)) + 1
			s := string(line)
			if len(s) > 200 {
				s = s[:200] + "…"
			}
			if err == nil {
				l.last = append(l.last, s)
				if len(l.last) > keepStderr {
					l.last = l.last[1:]
				}
			}
		case errors.Is(err, stdio.ErrLineTooLong):
			l.tooLong++
			l.bytes += int64(l.max)
		}
		l.mu.Unlock()
		if err != nil && !errors.Is(err, stdio.ErrLineTooLong) {
			return // the Child discards the rest
		}
	}
}

// tail returns the last stderr lines for an error message, or "" when there were none.
func (l *stderrLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) == 0 {
		return ""
	}
	return "; last stderr: " + strings.Join(l.last, " | ")
}
