package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/protocol"
)

// TestReplaySecured: `millrace replay` reads the sidecar's FLOW_KAFKA_* variables, reaches a
// broker that demands SCRAM over TLS with them, and a wrong password exits 1 naming the
// variable, never the password.
func TestReplaySecured(t *testing.T) {
	b, vars := testkit.NewSecuredBroker(t, testkit.Security{Mechanism: "SCRAM-SHA-256"})
	topic := b.Topic(t, "dlq", 1)
	b.Produce(t, &kgo.Record{Topic: topic, Value: []byte("1")})
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(k string) string { return vars[k] }}
		return dispatch(context.Background(), e, args), out.String(), errOut.String()
	}
	args := []string{"replay", "dead-letters", "--brokers", strings.Join(b.Addrs, ","), "--from", topic, "--dry-run"}
	if code, out, errOut := run(args...); code != 0 || !strings.Contains(out, "done: 1 read") {
		t.Errorf("replay dead-letters on the secured broker = %d\n%s%s\nwant 1 read", code, out, errOut)
	}
	delete(vars, "FLOW_KAFKA_SASL_PASSWORD_FILE")
	vars["FLOW_KAFKA_SASL_PASSWORD"] = testkit.SecuredPassword + "-wrong"
	code, out, errOut := run(args...)
	if code != 1 || !strings.Contains(errOut, "FLOW_KAFKA_SASL_PASSWORD: ") || strings.Contains(out+errOut, testkit.SecuredPassword) {
		t.Errorf("replay with a wrong password = %d\n%s%s\nwant exit 1 naming FLOW_KAFKA_SASL_PASSWORD, without the password", code, out, errOut)
	}
	if code, out, _ := runCmd(t, "replay", "rewind", "-h"); code != 0 || !strings.Contains(out, "FLOW_KAFKA_SASL_PASSWORD_FILE") {
		t.Errorf("replay rewind -h = %d\n%s\nwant the FLOW_KAFKA_* variables listed", code, out)
	}
}

// TestSidecarSecretsStaySecret: `millrace sidecar -log-level debug` refused by a secured broker
// for a wrong known password, its help and its configuration errors never show the password.
func TestSidecarSecretsStaySecret(t *testing.T) {
	b, vars := testkit.NewSecuredBroker(t, testkit.Security{Mechanism: "SCRAM-SHA-512"})
	const secret = "Wrong-But-Known-4c1d"
	a, err := bridge.ParseLine([]string{"s", "--in", "in=a.v1", "--out", "out=b.v1", "--", "cat"})
	if err != nil {
		t.Fatal(err)
	}
	descriptor, err := protocol.MarshalDescriptor(a.Spec(Version()))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "descriptor.json")
	if err := os.WriteFile(file, descriptor, 0o600); err != nil {
		t.Fatal(err)
	}
	vars["FLOW_BROKERS"], vars["FLOW_PIPELINE"], vars["FLOW_STREAMLET"], vars["FLOW_DESCRIPTOR"] = strings.Join(b.Addrs, ","), "p", "s", file
	vars["FLOW_INLETS"], vars["FLOW_OUTLETS"], vars["FLOW_READINESS_FILE"] = "in=t-in", "out=t-out", filepath.Join(t.TempDir(), "ready")
	delete(vars, "FLOW_KAFKA_SASL_PASSWORD_FILE")
	vars["FLOW_KAFKA_SASL_PASSWORD"] = secret
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(k string) string { return vars[k] }}
		return dispatch(context.Background(), e, args), out.String() + errOut.String()
	}
	code, out := run("sidecar", "-log-level", "debug")
	if code != 1 || !strings.Contains(out, "FLOW_KAFKA_SASL_PASSWORD: ") {
		t.Errorf("millrace sidecar with a wrong password = %d\n%s\nwant exit 1 naming FLOW_KAFKA_SASL_PASSWORD", code, out)
	}
	all := out
	vars["FLOW_KAFKA_SASL_MECHANISM"] = "GSSAPI"
	code, out = run("sidecar", "-log-level", "debug")
	if code != 1 || !strings.Contains(out, "FLOW_KAFKA_SASL_MECHANISM=GSSAPI") {
		t.Errorf("millrace sidecar with a bad mechanism = %d\n%s\nwant exit 1 naming it", code, out)
	}
	all += out
	_, out = run("sidecar", "-h")
	all += out
	if strings.Contains(all, secret) {
		t.Errorf("an output shows the password:\n%s", all)
	}
}
