package state

// Abandon closes the file as a crash would: without marking it clean.
func (p *Partition) Abandon() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	db := p.db
	p.db = nil
	return db.Close()
}
