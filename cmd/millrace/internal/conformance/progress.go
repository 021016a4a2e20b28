package conformance

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// defaultAnswerWait is how long the conformance kit waits for an answer, or for ready past
// the ready timeout, before it charges the check (Options.AnswerWait).
const defaultAnswerWait = 10 * time.Second

// streamHint is the way out for an action that says nothing: most are silent because a line
// sits in a buffer, their own stdout's or their stdin's.
const streamHint = "flush stdout after each line (print(…, flush=True) or python3 -u; awk: fflush()) and read stdin line by line as it comes, not in blocks (mawk: -W interactive; sed: -u)"

// batchHint is the way out for an action that declared envelopes and left items of one
// unanswered.
const batchHint = `read every message of an envelope ({"type":"batch","messages":[…]}: each an item as on its own line), lines up to 8 MiB long, and answer each item, or do not declare "batch": true in ready`

// answerWait is how long a session waits for an answer, and whether that is the kit's bound
// (shorter than the item timeout) rather than the item timeout itself. Zero: no bound.
func (r *runner) answerWait() (time.Duration, bool) {
	if r.wait > 0 && (r.a.Timeout == 0 || r.wait < r.a.Timeout) {
		return r.wait, true
	}
	return r.a.Timeout, false
}

// readyGrace is how long past the ready timeout a conformance conversation still waits for
// ready (at most: the answer wait when that is shorter), so that a slow start fails the ready
// check alone and the rest is still judged, and a silent action is judged within the ready
// timeout plus readyGrace.
const readyGrace = 3 * time.Second

// readyWait is how long a conversation waits for ready before giving up on it.
func (r *runner) readyWait() time.Duration {
	if r.wait > 0 {
		return r.a.ReadyTimeout + min(r.wait, readyGrace)
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
		r.mu.Lock()
		defer r.mu.Unlock()
		fmt.Fprintf(r.opts.Progress, "  … "+format+"\n", args...)
	}
}

// noteOnce writes a note of a kind every conversation may wait for alike (ready, an exit)
// only the first time.
func (r *runner) noteOnce(kind, format string, args ...any) {
	r.mu.Lock()
	seen := r.noted[kind]
	r.noted[kind] = true
	r.mu.Unlock()
	if !seen {
		r.notef(format, args...)
	}
}

// conversationChecks are the checks with a conversation of their own, in the order their
// lines are written as they complete.
var conversationChecks = []string{checkAnswers, checkUnknownKeys, checkConfig, checkNonASCII, checkLarge, checkBurst, checkBatch, checkConcurrent, checkCancel, checkState}

// finished marks the named checks complete and writes the line of each complete check not
// written yet, as it stands now: the conversations' checks in their order (a check that ends
// early waits for those before it), then, at the end, the others.
func (r *runner) finished(names ...string) {
	if r.opts.Progress == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fatal != nil {
		return // no verdict: Run returns the error
	}
	for _, n := range names {
		r.done[n] = true
	}
	for _, n := range conversationChecks {
		if !r.done[n] {
			break
		}
		r.writeLocked(n)
	}
	for _, n := range names {
		if !slices.Contains(conversationChecks, n) {
			r.writeLocked(n)
		}
	}
}

func (r *runner) writeLocked(name string) {
	if !r.printed[name] {
		r.printed[name] = true
		_ = writeCheck(r.opts.Progress, r.verdictLocked(name))
	}
}

// writeCheck writes one check's line: "PASS name: detail (time)", "FAIL …", or "SKIP name:
// cause" for one that could not be judged.
func writeCheck(w io.Writer, c Check) error {
	var err error
	switch {
	case c.Pass:
		_, err = fmt.Fprintf(w, "PASS %s: %s (%s)\n", c.Name, c.Detail, roundDur(c.Elapsed))
	case !c.Ran:
		_, err = fmt.Fprintf(w, "SKIP %s: %s\n", c.Name, c.Detail)
	default:
		_, err = fmt.Fprintf(w, "FAIL %s: %s (%s)\n", c.Name, c.Detail, roundDur(c.Elapsed))
	}
	return err
}
