package conformance

import (
	"fmt"
	"time"
)

// report assembles the checks.
func (r *runner) report() *Report {
	total := time.Since(r.start)
	var stderrLines, stderrTooLong int
	var stderrBytes int64
	for _, p := range r.procs {
		p.stderr.mu.Lock()
		stderrLines += p.stderr.lines
		stderrBytes += p.stderr.bytes
		stderrTooLong += p.stderr.tooLong
		p.stderr.mu.Unlock()
	}
	if stderrTooLong > 0 {
		r.fail(checkStderr, fmt.Sprintf("%d stderr lines longer than %s (a progress bar redrawn with \\r, or binary data?): end each log line with \\n", stderrTooLong, sizeName(r.opts.StderrLineMax)))
	}
	var slowest time.Duration
	for _, d := range r.readyTimes {
		slowest = max(slowest, d)
	}
	r.pass[checkReady] = fmt.Sprintf("answered hello with ready (slowest of %s: %s)", plural(len(r.readyTimes), "process", "processes"), roundDur(slowest))
	r.pass[checkFraming] = fmt.Sprintf("%s from %s, one JSON object per line", plural(r.messages, "message", "messages"), plural(len(r.procs), "process", "processes"))
	r.pass[checkStdout] = "nothing but protocol lines on stdout"
	r.pass[checkSilence] = fmt.Sprintf("nothing out of turn, over %d quiet waits and every delivery", r.quiets)
	if r.several > 0 {
		r.pass[checkOutputs] = fmt.Sprintf("%s to declared outlets; %s with several to one outlet, keyed distinctly", plural(r.outputs, "output", "outputs"), plural(r.several, "delivery", "deliveries"))
	} else {
		r.pass[checkOutputs] = fmt.Sprintf("%s to declared outlets (no delivery had several to one outlet)", plural(r.outputs, "output", "outputs"))
	}
	r.pass[checkStderr] = fmt.Sprintf("%s (%s) read as they came", plural(stderrLines, "line", "lines"), byteSize(stderrBytes))
	r.pass[checkShutdown] = fmt.Sprintf("%s exited with status 0 (slowest in %s)", plural(r.shutdowns, "process", "processes"), roundDur(r.shutdownMax))
	for _, c := range []string{checkFraming, checkStdout, checkSilence, checkOutputs, checkStderr} {
		r.elapsed[c] = total
	}
	r.elapsed[checkShutdown] = r.shutdownMax

	rep := &Report{Action: r.a.Name, Conformant: true}
	for _, c := range checkList {
		ck := r.verdict(c.Name)
		if !ck.Pass {
			rep.Conformant = false
		}
		rep.Checks = append(rep.Checks, ck)
	}
	for _, c := range checkList {
		r.finished(c.Name)
	}
	return rep
}

// verdict is the check name as it stands: failed, not judged because another check failed
// (skipped), or passed with its detail.
func (r *runner) verdict(name string) Check {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.verdictLocked(name)
}

func (r *runner) verdictLocked(name string) Check {
	ck := Check{Name: name, Elapsed: r.elapsed[name], Ran: true}
	fails := r.fails[name]
	cause, skipped := r.skip[name]
	switch {
	case len(fails) > 0:
		ck.Detail = fails[0]
		if len(fails) > 1 {
			ck.Detail += fmt.Sprintf(" (and %d more)", len(fails)-1)
		}
		return ck
	case skipped:
	case r.blocked != "" && r.unseen(name):
		cause = r.blocked
	case name == checkShutdown && r.shutdowns == 0:
		ck.Ran, ck.Detail = false, "no conversation reached shutdown (see the failures above)"
		return ck
	case r.pass[name] == "":
		ck.Ran, ck.Detail = false, "another check's fault ended its conversation (see the failures above)"
		return ck
	default:
		ck.Pass = true
		ck.Detail = r.pass[name]
		return ck
	}
	ck.Ran, ck.Detail = false, cause+" failed"
	return ck
}

// unseen reports whether nothing of check could be seen in a run whose main conversation
// never got going (r.blocked): no conversation of its own, or nothing it watches.
func (r *runner) unseen(check string) bool {
	switch check {
	case checkReady, checkStderr:
		return false
	case checkShutdown:
		return r.shutdowns == 0
	case checkOutputs:
		return r.answers == 0
	case checkFraming, checkStdout, checkSilence:
		return r.messages == 0
	}
	return true
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// plural is n with the noun that fits it: "1 item", "2 items".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
