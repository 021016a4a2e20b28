package engine

func (p *Pool) setHealth(err error) {
	p.healthMu.Lock()
	was := p.health
	p.health = err
	if err == nil {
		p.startFails = 0
	}
	p.healthMu.Unlock()
	if (was == nil) != (err == nil) {
		if err == nil {
			p.log.Info("action healthy again", "action", p.cfg.Name)
		}
		if h := p.cfg.Hooks.Health; h != nil {
			h(err)
		}
	}
}

// healthErr returns nil while the pool can start processes, or an error wrapping ErrCrashLoop
// that names the command and quotes its last stderr lines after CrashLoopAfter consecutive
// failed starts. It turns nil again after the next successful start.
func (p *Pool) healthErr() error {
	p.healthMu.Lock()
	defer p.healthMu.Unlock()
	return p.health
}
