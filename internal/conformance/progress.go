package conformance

import (
	"fmt"
	"io"
	"time"
)

// DefaultAnswerWait is how long the conformance kit waits for an answer, or for ready past
// the ready timeout, before it charges the check (Options.AnswerWait).
const DefaultAnswerWait = 10 * time.Second

// streamHint is the way out for an action that says nothing: most are silent because a line
// sits in a buffer, their own stdout's or their stdin's.
const streamHint = "flush stdout after each line (print(…, flush=True) or python3 -u; awk: fflush()) and read stdin line by line as it comes, not in blocks (mawk: -W interactive; sed: -u)"

// answerWait is how long a session waits for an answer, and whether that is the kit's bound
// (shorter than the item timeout) rather than the item timeout itself. Zero: no bound.
func (r *runner) answerWait() (time.Duration, bool) {
	if r.wait > 0 && (r.a.Timeout == 0 || r.wait < r.a.Timeout) {
		return r.wait, true
	}
	return r.a.Timeout, false
}

// readyWait is how long a conversation waits for ready before giving up on it: past the ready
// timeout, so that a slow start fails the ready check alone and the rest still runs, by the
// answer wait in a conformance run (the verdict comes within the ready timeout plus that).
func (r *runner) readyWait() time.Duration {
	if r.wait > 0 {
		return r.a.ReadyTimeout + r.wait
	}
	return 2*r.a.ReadyTimeout + 5*time.Second
}

// noticeAfter is how long the action may be silent before the kit says what it waits for.
func noticeAfter(wait time.Duration) time.Duration {
	if wait <= 0 {
		return 2 * time.Second
	}
	return min(2*time.Second, wait/2)
}

// noticeTimer fires once after noticeAfter(wait) when the run streams its progress; it never
// fires otherwise.
func (r *runner) noticeTimer(wait time.Duration) *itemTimer {
	if r.opts.Progress == nil {
		return newItemTimer(0)
	}
	return newItemTimer(noticeAfter(wait))
}

// notef writes a note of what the kit waits for to the progress writer.
func (r *runner) notef(format string, args ...any) {
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "  … "+format+"\n", args...)
	}
}

// finished writes the line of each named check not written yet, as it stands now.
func (r *runner) finished(names ...string) {
	if r.opts.Progress == nil {
		return
	}
	for _, n := range names {
		if !r.printed[n] {
			r.printed[n] = true
			_ = writeCheck(r.opts.Progress, r.verdict(n))
		}
	}
}

// writeCheck writes one check's line: "PASS name: detail (time)" or "FAIL …".
func writeCheck(w io.Writer, c Check) error {
	verdict := "PASS"
	if !c.Pass {
		verdict = "FAIL"
	}
	_, err := fmt.Fprintf(w, "%s %s: %s (%s)\n", verdict, c.Name, c.Detail, roundDur(c.Elapsed))
	return err
}
