// Command gapecho is the echo action of the batch-boundary benchmark (BenchmarkGap): it emits
// every item's payload, as the Go echo action does, declares a window of 64, and measures how
// long it sits idle: every time it has answered everything it has read and its stdin holds
// nothing more, the wait for the next bytes is one idle period. On shutdown it writes every
// idle period, in nanoseconds, one a line, to the file named by its only argument.
//
// It speaks the action protocol at the byte level (no SDK), so that what it measures is the
// engine's pace and not its own.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gapecho STATS_FILE")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gapecho:", err)
		os.Exit(1)
	}
}

func run(stats string) error {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	var idle []time.Duration
	started := false // idle periods count from the first item on
	for {
		if in.Buffered() == 0 {
			if err := out.Flush(); err != nil {
				return err
			}
			t0 := time.Now()
			if _, err := in.Peek(1); err != nil {
				return fmt.Errorf("stdin ended without shutdown: %w", err)
			}
			if started {
				idle = append(idle, time.Since(t0))
			}
		}
		line, err := in.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
		switch {
		case bytes.HasPrefix(line, []byte(`{"type":"item","delivery":"`)):
			started = true
			delivery, _, _ := bytes.Cut(line[len(`{"type":"item","delivery":"`):], []byte(`"`))
			_, rest, _ := bytes.Cut(line, []byte(`,"payload":`))
			payload := rest[:payloadEnd(rest)]
			fmt.Fprintf(out, "{\"type\":\"emit\",\"delivery\":\"%s\",\"payload\":%s}\n{\"type\":\"done\",\"delivery\":\"%s\"}\n", delivery, payload, delivery)
		case bytes.HasPrefix(line, []byte(`{"type":"hello"`)):
			out.WriteString(`{"type":"ready","window":64}` + "\n")
		case bytes.HasPrefix(line, []byte(`{"type":"shutdown"`)):
			var b []byte
			for _, d := range idle {
				b = strconv.AppendInt(b, int64(d), 10)
				b = append(b, '\n')
			}
			if err := os.WriteFile(stats, b, 0o644); err != nil {
				return err
			}
			return out.Flush()
		}
	}
}

// payloadEnd returns the length of the JSON value at the start of b (an object, as the
// benchmark's values are; strings inside it may hold braces).
func payloadEnd(b []byte) int {
	depth, str, esc := 0, false, false
	for i, c := range b {
		switch {
		case esc:
			esc = false
		case str && c == '\\':
			esc = true
		case c == '"':
			str = !str
		case str:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return len(b)
}
