package tlsconf_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/internal/tlsconf"
)

func collect() (*[]string, func(string, ...any)) {
	var problems []string
	return &problems, func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
}

// TestReadPrefixed: another client's prefix names its own variables in the configuration and
// in every problem, and without an Enable variable the configuration is always returned.
func TestReadPrefixed(t *testing.T) {
	ca := testkit.NewCA(t, "registry")
	client := ca.Issue(t, "client", time.Time{}, time.Time{})
	v := tlsconf.Vars{CAFile: "MILLRACE_SCHEMA_REGISTRY_TLS_CA_FILE",
		CertFile: "MILLRACE_SCHEMA_REGISTRY_TLS_CERT_FILE", KeyFile: "MILLRACE_SCHEMA_REGISTRY_TLS_KEY_FILE"}
	env := map[string]string{"MILLRACE_SCHEMA_REGISTRY_TLS_CA_FILE": ca.File,
		"MILLRACE_SCHEMA_REGISTRY_TLS_CERT_FILE": client.CertFile, "MILLRACE_SCHEMA_REGISTRY_TLS_KEY_FILE": client.KeyFile}
	problems, bad := collect()
	cfg := tlsconf.Read(v, func(k string) string { return env[k] }, os.ReadFile, time.Now(), bad)
	if len(*problems) > 0 || cfg == nil || cfg.RootCAs == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("Read = %+v, problems %q; want the CA and the client certificate", cfg, *problems)
	}

	delete(env, "MILLRACE_SCHEMA_REGISTRY_TLS_KEY_FILE")
	problems, bad = collect()
	tlsconf.Read(v, func(k string) string { return env[k] }, os.ReadFile, time.Now(), bad)
	if len(*problems) != 1 || !strings.Contains((*problems)[0], "MILLRACE_SCHEMA_REGISTRY_TLS_CERT_FILE and MILLRACE_SCHEMA_REGISTRY_TLS_KEY_FILE go together") {
		t.Errorf("problems = %q; want one naming the prefixed pair", *problems)
	}
}

// TestSecret: inline or from a file (without its newline), never both, and the variable it
// came from is returned so that an error can name it without showing it.
func TestSecret(t *testing.T) {
	const secret = "Pa55-do-not-show"
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		env         map[string]string
		value, from string
		problem     string
	}{
		{"inline", map[string]string{"X_PASSWORD": secret}, secret, "X_PASSWORD", ""},
		{"file", map[string]string{"X_PASSWORD_FILE": file}, secret, "X_PASSWORD_FILE", ""},
		{"neither", map[string]string{}, "", "", ""},
		{"both", map[string]string{"X_PASSWORD": secret, "X_PASSWORD_FILE": file}, "", "X_PASSWORD", "X_PASSWORD and X_PASSWORD_FILE are both set"},
		{"unreadable", map[string]string{"X_PASSWORD_FILE": "/nonexistent/pw"}, "", "X_PASSWORD_FILE", "X_PASSWORD_FILE=/nonexistent/pw cannot be read"},
		{"empty file", map[string]string{"X_PASSWORD_FILE": empty}, "", "X_PASSWORD_FILE", "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, bad := collect()
			value, from := tlsconf.Secret("X_PASSWORD", func(k string) string { return tc.env[k] }, os.ReadFile, bad)
			if value != tc.value || from != tc.from {
				t.Errorf("Secret = %q from %q; want %q from %q", value, from, tc.value, tc.from)
			}
			all := strings.Join(*problems, "\n")
			switch {
			case tc.problem == "" && len(*problems) > 0, tc.problem != "" && (len(*problems) != 1 || !strings.Contains(all, tc.problem)):
				t.Errorf("problems = %q; want %q", *problems, tc.problem)
			case strings.Contains(all, secret):
				t.Errorf("problems = %q show the secret", *problems)
			}
		})
	}
}
