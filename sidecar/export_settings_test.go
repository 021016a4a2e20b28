package sidecar

// ConfigOf returns the configuration s runs with: its Config after New gave it the defaults.
func ConfigOf(s *Sidecar) Config { return s.cfg }

// CloseUnrun closes what New opened, for a Sidecar that is never Run.
func CloseUnrun(s *Sidecar) error { return s.conn.Close() }
