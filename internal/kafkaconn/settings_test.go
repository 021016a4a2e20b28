package kafkaconn_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
	"github.com/ankka-flow/millrace/internal/testkit"
)

func parse(env map[string]string) (kafkaconn.Settings, []string) {
	var problems []string
	s := kafkaconn.FromEnv(func(k string) string { return env[k] }, os.ReadFile, func(f string, a ...any) {
		problems = append(problems, fmt.Sprintf(f, a...))
	})
	return s, problems
}

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFromEnvProblems: every bad combination is one problem naming its variable, and no
// problem shows a secret.
func TestFromEnvProblems(t *testing.T) {
	const secret = "Pa55-do-not-show"
	ca := testkit.NewCA(t, "ca")
	old := ca.Issue(t, "old-client", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"password twice", map[string]string{"FLOW_KAFKA_SASL_MECHANISM": "PLAIN", "FLOW_KAFKA_SASL_USERNAME": "u",
			"FLOW_KAFKA_SASL_PASSWORD": secret, "FLOW_KAFKA_SASL_PASSWORD_FILE": write(t, "pw", secret)}, "FLOW_KAFKA_SASL_PASSWORD and FLOW_KAFKA_SASL_PASSWORD_FILE are both set"},
		{"password file missing", map[string]string{"FLOW_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "FLOW_KAFKA_SASL_USERNAME": "u",
			"FLOW_KAFKA_SASL_PASSWORD_FILE": "/nonexistent/pw"}, "FLOW_KAFKA_SASL_PASSWORD_FILE=/nonexistent/pw cannot be read"},
		{"empty password file", map[string]string{"FLOW_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "FLOW_KAFKA_SASL_USERNAME": "u",
			"FLOW_KAFKA_SASL_PASSWORD_FILE": write(t, "empty", "\n")}, "is empty"},
		{"no user", map[string]string{"FLOW_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "FLOW_KAFKA_SASL_PASSWORD": secret}, "needs FLOW_KAFKA_SASL_USERNAME"},
		{"unknown mechanism", map[string]string{"FLOW_KAFKA_SASL_MECHANISM": "GSSAPI", "FLOW_KAFKA_SASL_USERNAME": "u", "FLOW_KAFKA_SASL_PASSWORD": secret}, "FLOW_KAFKA_SASL_MECHANISM=GSSAPI is not PLAIN"},
		{"password without mechanism", map[string]string{"FLOW_KAFKA_SASL_PASSWORD": secret}, "FLOW_KAFKA_SASL_MECHANISM is not"},
		{"token without file", map[string]string{"FLOW_KAFKA_SASL_MECHANISM": "OAUTHBEARER"}, "needs FLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE"},
		{"token with password", map[string]string{"FLOW_KAFKA_SASL_MECHANISM": "OAUTHBEARER", "FLOW_KAFKA_SASL_PASSWORD": secret,
			"FLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE": write(t, "token", "tok")}, "takes a token, not a user and password"},
		{"token file for SCRAM", map[string]string{"FLOW_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "FLOW_KAFKA_SASL_USERNAME": "u", "FLOW_KAFKA_SASL_PASSWORD": secret,
			"FLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE": write(t, "token", "tok")}, "is only for OAUTHBEARER"},
		{"expired client certificate", map[string]string{"FLOW_KAFKA_TLS": "true", "FLOW_KAFKA_TLS_CERT_FILE": old.CertFile, "FLOW_KAFKA_TLS_KEY_FILE": old.KeyFile},
			"FLOW_KAFKA_TLS_CERT_FILE=" + old.CertFile + `: the client certificate "old-client" expired at`},
		{"key is not the certificate's", map[string]string{"FLOW_KAFKA_TLS": "true", "FLOW_KAFKA_TLS_CERT_FILE": old.CertFile,
			"FLOW_KAFKA_TLS_KEY_FILE": ca.Issue(t, "other", time.Time{}, time.Time{}).KeyFile}, "are not a certificate and its key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, problems := parse(tc.env)
			all := strings.Join(problems, "\n")
			if len(problems) != 1 || !strings.Contains(all, tc.want) {
				t.Errorf("problems = %q; want one, with %q", problems, tc.want)
			}
			if strings.Contains(all, secret) {
				t.Errorf("problems = %q show the password", problems)
			}
		})
	}
}

// TestPasswordFile: the password comes from the file without its trailing newline, and the
// mechanism says where it came from, never what it is.
func TestPasswordFile(t *testing.T) {
	const secret = "from-a-Secret"
	s, problems := parse(map[string]string{"FLOW_KAFKA_SASL_MECHANISM": "scram-sha-512", "FLOW_KAFKA_SASL_USERNAME": "alice",
		"FLOW_KAFKA_SASL_PASSWORD_FILE": write(t, "pw", secret+"\n")})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	a, ok := s.SASL.(*kafkaconn.Auth)
	if !ok || a.Name() != "SCRAM-SHA-512" || a.User != "alice" || a.Secret != "FLOW_KAFKA_SASL_PASSWORD_FILE" {
		t.Fatalf("SASL = %#v; want SCRAM-SHA-512 for alice from FLOW_KAFKA_SASL_PASSWORD_FILE", s.SASL)
	}
	if shown := fmt.Sprintf("%v %+v %s", s, s, a); strings.Contains(shown, secret) {
		t.Errorf("printing the settings shows the password: %s", shown)
	}
}

// TestTokenFileReread: the OAUTHBEARER token file is read at every authentication, so a
// rotated token (a projected service-account token) is the one the next connection sends.
func TestTokenFileReread(t *testing.T) {
	file := write(t, "token", "first-token\n")
	s, problems := parse(map[string]string{"FLOW_KAFKA_SASL_MECHANISM": "OAUTHBEARER", "FLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE": file})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	first := func() string {
		t.Helper()
		_, msg, err := s.SASL.Authenticate(context.Background(), "127.0.0.1:9092")
		if err != nil {
			t.Fatalf("Authenticate: %v", err)
		}
		return string(msg)
	}
	if msg := first(); !strings.Contains(msg, "auth=Bearer first-token\x01") {
		t.Errorf("first message %q; want the file's token", msg)
	}
	if err := os.WriteFile(file, []byte("rotated-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := first(); !strings.Contains(msg, "auth=Bearer rotated-token\x01") {
		t.Errorf("message after rotation %q; want the new token", msg)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.SASL.Authenticate(context.Background(), "127.0.0.1:9092"); err == nil || !strings.Contains(err.Error(), "FLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE") {
		t.Errorf("Authenticate with an empty token file = %v; want an error naming the file's variable", err)
	}
}
