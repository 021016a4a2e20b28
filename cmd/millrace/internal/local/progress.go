package local

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// progressQueryTimeout bounds the broker queries of one progress line.
const progressQueryTimeout = time.Second

// drawProgress redraws the progress line: records in, committed, out, failed, the rate of
// commits since the last line (over since, from the count prev) and the lag. It returns the
// count now.
func (r *runner) drawProgress(ctx context.Context, since time.Duration, prev int64) int64 {
	if r.opts.Progress == nil {
		return prev
	}
	s := r.summary(false)
	rate := float64(s.Committed-prev) / since.Seconds()
	lag := "?"
	qctx, cancel := context.WithTimeout(ctx, progressQueryTimeout)
	defer cancel()
	if n, err := r.lag(qctx); err == nil {
		lag = fmt.Sprint(n)
	} else {
		r.log.Debug("reading the lag for the progress line", "error", err)
	}
	fmt.Fprintf(r.opts.Progress, "\r\033[K  in %d  committed %d  out %d  failed %d  %.0f rec/s  lag %s", s.In, s.Committed, s.Total(), s.Failed, rate, lag)
	return s.Committed
}

func (r *runner) clearProgress() {
	if r.opts.Progress != nil {
		fmt.Fprint(r.opts.Progress, "\r\033[K")
	}
}

// lag returns the records the streamlets have not yet committed on their inlets, as the
// broker sees it: for every inlet partition, its end offset minus the consumer group's
// committed offset (the start of the partition when the group committed none), summed.
func (r *runner) lag(ctx context.Context) (int64, error) {
	commits := map[*running]map[string]map[int32]int64{}
	var topics []string
	for _, st := range r.streamlets {
		c, err := r.committed(ctx, st)
		if err != nil {
			return 0, err
		}
		commits[st] = c
		topics = append(topics, st.s.Inlets()...)
	}
	slices.Sort(topics)
	ends, err := r.endOffsets(ctx, slices.Compact(topics))
	if err != nil {
		return 0, err
	}
	var lag int64
	for _, st := range r.streamlets {
		for _, t := range st.s.Inlets() {
			for p, end := range ends[t] {
				c, ok := commits[st][t][p]
				if !ok || c < 0 {
					c = 0
				}
				lag += max(end-c, 0)
			}
		}
	}
	return lag, nil
}
