package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
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
