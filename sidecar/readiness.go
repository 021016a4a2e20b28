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

// Ready reports whether the readiness file at path exists: the check of
// `millrace sidecar ready-check`, for a container probe without a shell.
func Ready(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
