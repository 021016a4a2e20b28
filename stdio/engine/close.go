package engine

import (
	"context"
	"fmt"
)

// abandonAll ends every unfinished item as Abandoned: queued, waiting behind a key, waiting to
// retry and in flight.
func (p *Pool) abandonAll() {
	p.mu.Lock()
	p.abandoning.Store(true)
	var tasks []*task
	for drained := false; !drained; {
		select {
		case t := <-p.ready:
			tasks = append(tasks, t)
		default:
			drained = true
		}
	}
	for _, q := range p.keys {
		if q != nil {
			tasks = append(tasks, q.items[q.head:]...)
		}
	}
	p.keys = make(map[string]*keyQueue)
	for t := range p.retrying {
		if t.retry.Stop() {
			p.timers.Done()
		}
		tasks = append(tasks, t)
	}
	clear(p.retrying)
	procs := make([]*process, 0, len(p.procs))
	for pr := range p.procs {
		procs = append(procs, pr)
	}
	p.mu.Unlock()
	for _, t := range tasks {
		p.final(t, Result{Outcome: Abandoned, Err: fmt.Errorf("%w: item %s abandoned", ErrClosed, t.item.ID), Metrics: t.metrics, Attempts: t.attempts})
	}
	for _, pr := range procs {
		pr.abandon()
	}
}

// Close stops the pool. With drain, queued and in-flight items finish first (retries
// included); without it, or when ctx ends first, every unfinished item is Abandoned at once.
// Then every process gets shutdown and, after ShutdownGrace, SIGTERM then SIGKILL of its
// process group (at once when ctx has ended). Close returns when every done callback has run
// and every goroutine and process is gone, with ctx.Err() if ctx ended before the drain
// finished. It may be called more than once; later calls wait for the first and return nil.
func (p *Pool) Close(ctx context.Context, drain bool) error {
	p.mu.Lock()
	if p.isClosed() {
		p.mu.Unlock()
		<-p.closeDone
		return nil
	}
	defer close(p.closeDone)
	close(p.closed)
	idle := p.outstanding == 0
	p.mu.Unlock()
	var err error
	if drain && !idle {
		select {
		case <-p.drained:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if !drain || err != nil {
		p.abandonAll()
	}
	p.stopCtx = ctx
	p.lifeCancel()
	p.wg.Wait()
	p.timers.Wait()
	p.log.Info("action pool closed", "action", p.cfg.Name, "drained", drain && err == nil)
	return err
}

// isClosed reports whether Close has begun; the caller holds mu.
func (p *Pool) isClosed() bool {
	select {
	case <-p.closed:
		return true
	default:
		return false
	}
}
