package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSidecarReadyCheck(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	vars := map[string]string{"FLOW_READINESS_FILE": ready}
	run := func() (int, string) {
		var out, errb bytes.Buffer
		code := dispatch(context.Background(), &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}, []string{"sidecar", "ready-check"})
		return code, errb.String()
	}
	if code, msg := run(); code != 1 || !strings.Contains(msg, ready) {
		t.Errorf("sidecar ready-check without the file = %d %q; want 1 naming the file", code, msg)
	}
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, msg := run(); code != 0 {
		t.Errorf("sidecar ready-check with the file = %d %q; want 0", code, msg)
	}
}

func TestSidecarBadConfig(t *testing.T) {
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), &env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}, []string{"sidecar"})
	if code != 1 {
		t.Errorf("sidecar with no configuration = %d; want 1", code)
	}
	for _, want := range []string{"FLOW_BROKERS is missing", "FLOW_PIPELINE is missing", "FLOW_DESCRIPTOR is missing"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q; want every problem, including %q", errb.String(), want)
		}
	}
}
