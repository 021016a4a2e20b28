package sidecar

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// writeReadiness marks the sidecar ready (/readyz, millrace_sidecar_conversation_live) and
// creates the readiness file atomically (a temporary file in the same folder, renamed into
// place), so a probe never sees a half-written file.
func (s *Sidecar) writeReadiness(conversationID string) {
	if s.denial.Load() != nil {
		return // not ready while a permission is refused: clearDenial writes it
	}
	s.ready.Store(true)
	path := s.cfg.ReadinessFile
	if path == "" {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ready-*")
	if err == nil {
		_, err = tmp.WriteString(conversationID + "\n")
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		s.log.Error("cannot write the readiness file; the pod will not become ready: make its folder writable or set FLOW_READINESS_FILE", "path", path, "error", err)
	}
}

// removeReadiness marks the sidecar not ready and removes the readiness file; a missing file
// is fine.
func (s *Sidecar) removeReadiness() {
	s.ready.Store(false)
	path := s.cfg.ReadinessFile
	if path == "" {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Error("cannot remove the readiness file; the pod may look ready while it is not", "path", path, "error", err)
	}
}

// deny marks the sidecar not ready while the broker refuses it a permission it needs, p
// naming it (/readyz answers with it), until clearDenial: a pod that cannot move its records
// is not ready, whether its conversation goes on (a fetch refused) or is begun again (a
// write or commit refused).
func (s *Sidecar) deny(p *PermissionError) {
	if s.denial.Swap(p) == nil {
		s.removeReadiness()
	}
}

// clearDenial is called when a commit succeeds: the permissions it needs are back, and the
// live conversation, if any, is ready again.
func (s *Sidecar) clearDenial() {
	if s.denial.Swap(nil) == nil {
		return
	}
	s.mu.Lock()
	c := s.conv
	s.mu.Unlock()
	if c != nil {
		s.log.Info("Kafka allows the sidecar's operations again; ready")
		s.writeReadiness(c.start.GetConversationId())
	}
}

// Ready reports whether the readiness file at path exists: the check of
// `millrace sidecar ready-check`, for a container probe without a shell.
func Ready(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
