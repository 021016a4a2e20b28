package local

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/protocol"
	"github.com/ankka-flow/millrace/sidecar"
)

// watch waits for the end of the run: done, a fault, or ctx. The bridges' log records held
// back before a first start are passed on unless the end is a fault that can only repeat.
func (r *runner) watch(ctx context.Context, inputDone <-chan struct{}) error {
	err := r.watchUntil(ctx, inputDone)
	if !errors.Is(err, errRepeats) {
		for _, st := range r.streamlets {
			st.faults.release(context.WithoutCancel(ctx))
		}
	}
	return err
}

func (r *runner) watchUntil(ctx context.Context, inputDone <-chan struct{}) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastDraw, lastCommitted := time.Now(), int64(0)
	defer r.clearProgress()
	for {
		select {
		case <-ctx.Done():
			if r.opts.Follow {
				return nil
			}
			return ErrInterrupted // Run says how far it got, once the streamlets stopped
		case <-tick.C:
		}
		now := time.Now()
		for _, st := range r.streamlets {
			if err := st.faults.failed(); err != nil {
				return err
			}
			st.faults.expire(context.WithoutCancel(ctx), now)
			if ended, err := st.sidecar.ended(); ended {
				if errors.Is(err, sidecar.ErrRefused) {
					return &refusedError{streamlet: st.s.Action.Name, err: err}
				}
				return fmt.Errorf("the sidecar of %s stopped: %w", st.s.Action.Name, orStopped(err))
			}
			if ended, err := st.bridge.ended(); ended {
				return fmt.Errorf("the bridge of %s stopped: %w", st.s.Action.Name, orStopped(err))
			}
			if st.sc.StallWarnings() > 0 {
				return fmt.Errorf("%w: streamlet %s: a batch kept failing for %s and no record after it is processed; the last error: %s", errStalled, st.s.Action.Name, r.opts.StallAfter, st.errs.get())
			}
		}
		r.mu.Lock()
		inErr, eof := r.inputErr, r.inputEOF
		r.mu.Unlock()
		if inErr != nil {
			return inErr
		}
		if since := time.Since(lastDraw); since >= 500*time.Millisecond {
			lastCommitted = r.drawProgress(ctx, since, lastCommitted)
			lastDraw = time.Now()
		}
		if !eof || r.opts.Follow {
			continue
		}
		done, err := r.caughtUp(ctx)
		if err != nil {
			r.log.Warn("checking progress", "error", err)
			continue
		}
		if done {
			return nil
		}
	}
}

// refusedError is a refused discovery: the sidecar's error, which lists the problems, and a
// hint for config values. It matches errRefused.
type refusedError struct {
	streamlet string
	err       error
}

func (e *refusedError) Error() string {
	hint := ""
	var ps protocol.Problems
	if errors.As(e.err, &ps) && slices.ContainsFunc(ps, func(p protocol.Problem) bool { return strings.HasPrefix(p.Path, "config.") }) {
		hint = "\n  (give config values with --set KEY=VALUE; in a pipeline file, on the streamlet's line)"
	}
	return fmt.Sprintf("streamlet %s: %v%s", e.streamlet, e.err, hint)
}

func (e *refusedError) Is(target error) bool { return target == errRefused }
func (e *refusedError) Unwrap() error        { return e.err }

func orStopped(err error) error {
	if err == nil {
		return errors.New("it returned without error")
	}
	return err
}
