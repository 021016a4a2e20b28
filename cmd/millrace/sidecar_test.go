package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/protocol"
	"github.com/ankka-flow/millrace/sidecar"
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

// TestSidecarEnvTable: `sidecar -h` lists every variable ConfigFromEnv reads, and nothing it
// does not, from the one table both come from (sidecar.Settings).
func TestSidecarEnvTable(t *testing.T) {
	env := map[string]string{
		"FLOW_BROKERS": "k:9092", "FLOW_PIPELINE": "p", "FLOW_STREAMLET": "s", "FLOW_DESCRIPTOR": "/d.json",
		"FLOW_INLETS": "in=t-in", "FLOW_OUTLETS": "out=t-out", "FLOW_KAFKA_TLS": "true",
		"FLOW_KAFKA_TLS_CERT_FILE": "/c.pem", "FLOW_KAFKA_TLS_KEY_FILE": "/k.pem", "FLOW_KAFKA_TLS_CA_FILE": "/ca.pem",
		"FLOW_KAFKA_SASL_MECHANISM": "PLAIN", "FLOW_KAFKA_SASL_USERNAME": "u", "FLOW_KAFKA_SASL_PASSWORD": "p",
		"KUBERNETES_SERVICE_HOST": "10.0.0.1", // in a pod: the FLOW_POD_* variables are read too
	}
	a, err := actionconf.ParseLine([]string{"s", "--in", "in=a.v1", "--out", "out=b.v1", "--", "cat"})
	if err != nil {
		t.Fatal(err)
	}
	descriptor, err := protocol.MarshalDescriptor(a.Spec(Version()))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(env)
	_, _ = sidecar.ConfigFromEnv(rec.getenv, func(string) ([]byte, error) { return descriptor, nil })
	read := map[string]bool{}
	for name := range rec.read {
		if !strings.HasPrefix(name, "FLOW_") {
			continue
		}
		if rest, ok := strings.CutPrefix(name, "FLOW_INLET_IN_"); ok {
			name = "FLOW_INLET_<PORT>_" + rest
		}
		read[name] = true
	}
	listed := map[string]bool{}
	for _, v := range sidecar.Settings {
		listed[v.Name] = true
		if !read[v.Name] {
			t.Errorf("sidecar -h lists %s, which ConfigFromEnv does not read", v.Name)
		}
	}
	for name := range read {
		if !listed[name] {
			t.Errorf("ConfigFromEnv reads %s, which sidecar -h does not list: add it to sidecar.Settings", name)
		}
	}
	code, out, _ := runCmd(t, "sidecar", "-h")
	for _, v := range sidecar.Settings {
		if code != 0 || !strings.Contains(out, "  "+v.Name+" (") {
			t.Errorf("sidecar -h = %d and does not list %s:\n%s", code, v.Name, out)
		}
	}
}
