package engine

import (
	"github.com/ankka-flow/millrace/stdio"

	"errors"
	"fmt"

	"github.com/cenkalti/backoff/v4"
)

func (p *Pool) restartBackOff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.cfg.RestartBackoff),
		backoff.WithMaxInterval(p.cfg.RestartMax),
		backoff.WithMaxElapsedTime(0),
	)
}

// respawn starts a replacement process for slot, backing off between failed starts and reporting a
// crash loop; it returns nil when the pool quits first.
func (p *Pool) respawn(bo *backoff.ExponentialBackOff, slot int) *process {
	for {
		select {
		case <-p.lifeCtx.Done():
			return nil
		default:
		}
		pr, err := p.spawn(p.lifeCtx, slot)
		if err == nil {
			p.mu.Lock()
			p.procs[pr] = struct{}{}
			p.mu.Unlock()
			p.slots[slot].Store(pr)
			p.turnChanged()
			bo.Reset()
			p.setHealth(nil)
			return pr
		}
		if p.lifeCtx.Err() != nil {
			return nil
		}
		p.healthMu.Lock()
		p.startFails++
		fails := p.startFails
		p.healthMu.Unlock()
		p.log.Error("action process failed to start", "action", p.cfg.Name, "err", err, "failed_starts_in_a_row", fails)
		if h := p.cfg.Hooks.ProcessStartFailed; h != nil {
			h(err)
		}
		if fails >= p.cfg.CrashLoopAfter {
			p.setHealth(fmt.Errorf("%w: %d starts in a row failed (queued items wait; fix the action or its config); last: %w", ErrCrashLoop, fails, err))
		}
		if !sleep(p.clock, bo.NextBackOff(), p.lifeCtx.Done()) {
			return nil
		}
	}
}

func isRetryable(err error) bool {
	if ae, ok := errors.AsType[*ActionError](err); ok {
		return ae.Retryable
	}
	return errors.Is(err, ErrCrashed) || errors.Is(err, ErrTimeout) || errors.Is(err, stdio.ErrProtocol)
}

// attemptEnded is called exactly once per attempt, by whoever took it out of a process's
// in-flight map: it schedules a retry or finishes the item.
func (p *Pool) attemptEnded(t *task, out Outcome, err error, reason string) {
	if out == Done {
		if serr := p.checkState(t); serr != nil {
			out, err = Failed, serr
		}
	}
	if out != Done { // a Done result's output is held on for its caller (Result.Held)
		p.cfg.Budget.Release(int64(t.staged))
		t.staged = 0
	}
	p.cfg.Budget.end()
	retry := out == Failed && isRetryable(err) && t.attempts < 1+p.cfg.Retries && !p.abandoning.Load()
	if out == Failed {
		p.log.Warn("action attempt failed", "action", p.cfg.Name, "item", t.item.ID, "delivery", t.item.Delivery, "attempt", t.attempts, "retry", retry, "err", err)
	}
	if h := p.cfg.Hooks.AttemptFinished; h != nil {
		h(AttemptInfo{Item: t.item, Outcome: out, Written: t.written, Latency: p.clock.Now().Sub(t.written), Err: err, Retry: retry})
	}
	if retry {
		p.mu.Lock()
		if !p.abandoning.Load() {
			if t.bo == nil {
				t.bo = backoff.NewExponentialBackOff(
					backoff.WithInitialInterval(p.cfg.RetryBackoff),
					backoff.WithMaxInterval(p.cfg.RetryMax),
					backoff.WithMaxElapsedTime(0),
				)
			}
			p.retrying[t] = struct{}{}
			p.timers.Add(1) // Close waits for the retry's function, should it fire
			t.retry = p.clock.AfterFunc(t.bo.NextBackOff(), func() { defer p.timers.Done(); p.retryNow(t) })
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	res := Result{Outcome: out, Metrics: t.metrics, Attempts: t.attempts, Trace: t.item.Trace}
	switch out {
	case Done:
		res.Emits, res.State = t.emits, t.state
		if p.cfg.Budget != nil {
			res.Held = int64(t.staged)
		}
	case Abstained:
		res.Reason = reason
	default:
		res.Err = err
	}
	if out == Failed && p.abandoning.Load() {
		res.Outcome = Abandoned
		res.Err = fmt.Errorf("%w: item %s abandoned after: %w", ErrClosed, t.item.ID, err)
	}
	p.final(t, res)
}

// retryNow queues t again once its backoff passed, unless the pool abandoned it meanwhile.
func (p *Pool) retryNow(t *task) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.retrying[t]; !ok {
		return
	}
	delete(p.retrying, t)
	p.ready <- t
}
