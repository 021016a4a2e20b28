package local

import (
	"fmt"
	"time"
)

// drawProgress redraws the progress line: records in, committed, out, failed, and the rate of
// commits since the last line (over since, from the count prev). It returns the count now.
func (r *runner) drawProgress(since time.Duration, prev int64) int64 {
	if r.opts.Progress == nil {
		return prev
	}
	s := r.summary(false)
	rate := float64(s.Committed-prev) / since.Seconds()
	fmt.Fprintf(r.opts.Progress, "\r\033[K  in %d  committed %d  out %d  failed %d  %.0f rec/s", s.In, s.Committed, s.Total(), s.Failed, rate)
	return s.Committed
}

func (r *runner) clearProgress() {
	if r.opts.Progress != nil {
		fmt.Fprint(r.opts.Progress, "\r\033[K")
	}
}
