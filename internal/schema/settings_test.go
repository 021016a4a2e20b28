package schema_test

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/ankka-flow/millrace/internal/testkit"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func settings(env map[string]string) (schema.Settings, []string) {
	var problems []string
	s := schema.SettingsFromEnv(func(k string) string { return env[k] }, os.ReadFile, func(f string, a ...any) {
		problems = append(problems, fmt.Sprintf(f, a...))
	})
	return s, problems
}

const pre = "MILLRACE_SCHEMA_REGISTRY_"

// TestSettingsFromEnv: the settings read as given, with their defaults.
func TestSettingsFromEnv(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/pass", "s3cret\n")
	writeFile(t, dir+"/token", "tok\n")
	ca := testkit.NewCA(t, "ca")
	client := ca.Issue(t, "client", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))

	s, problems := settings(nil)
	if len(problems) != 0 || !reflect.DeepEqual(s, schema.Settings{}) {
		t.Errorf("no variables = %+v, %q; want the zero Settings, no problem", s, problems)
	}
	s, problems = settings(map[string]string{pre + "URL": "http://a:8081, http://b:8081", pre + "USERNAME": "u", pre + "PASSWORD_FILE": dir + "/pass"})
	want := schema.Settings{URLs: []string{"http://a:8081", "http://b:8081"}, Username: "u", Password: "s3cret", Timeout: 10 * time.Second, CacheSize: 1000, CacheTTL: 5 * time.Minute}
	if len(problems) != 0 || !reflect.DeepEqual(s, want) {
		t.Errorf("basic auth = %+v, %q; want %+v", s, problems, want)
	}
	s, problems = settings(map[string]string{pre + "URL": "https://r", pre + "TOKEN_FILE": dir + "/token", pre + "CA_FILE": ca.File,
		pre + "CERT_FILE": client.CertFile, pre + "KEY_FILE": client.KeyFile, pre + "TIMEOUT": "3s", pre + "CACHE_SIZE": "5", pre + "CACHE_TTL": "1m"})
	if len(problems) != 0 || s.TokenFile != dir+"/token" || s.TLS == nil || s.TLS.RootCAs == nil || len(s.TLS.Certificates) != 1 ||
		s.Timeout != 3*time.Second || s.CacheSize != 5 || s.CacheTTL != time.Minute {
		t.Errorf("https with a token file and mutual TLS = %+v, %q", s, problems)
	}
	s, problems = settings(map[string]string{pre + "URL": "https://r", pre + "TOKEN": "tok"})
	if len(problems) != 0 || s.BearerToken != "tok" || s.TLS == nil || s.TLS.RootCAs != nil {
		t.Errorf("https with a token = %+v, %q; want system roots and the token", s, problems)
	}
}

// TestSettingsProblems: every wrong value is one problem naming its variable, and none shows
// a secret.
func TestSettingsProblems(t *testing.T) {
	const secret = "Pa55-do-not-show"
	dir := t.TempDir()
	writeFile(t, dir+"/empty", "\n")
	writeFile(t, dir+"/notpem", secret)
	url := map[string]string{pre + "URL": "https://r"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range url {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[pre+kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no URL", map[string]string{pre + "USERNAME": "u"}, pre + "USERNAME is set but " + pre + "URL is not"},
		{"not a URL", map[string]string{pre + "URL": "://x"}, pre + "URL: \"://x\" is not a URL"},
		{"scheme", map[string]string{pre + "URL": "ftp://r"}, "not an http:// or https:// URL"},
		{"no host", map[string]string{pre + "URL": "http://"}, "names no host"},
		{"credentials in the URL", map[string]string{pre + "URL": "http://u:" + secret + "@r"}, "carries credentials"},
		{"TLS files on http", map[string]string{pre + "URL": "http://r", pre + "CA_FILE": dir + "/x"}, "has no https:// URL"},
		{"CA unreadable", with("CA_FILE", dir+"/missing"), pre + "CA_FILE=" + dir + "/missing cannot be read"},
		{"CA not PEM", with("CA_FILE", dir+"/notpem"), "holds no PEM certificate"},
		{"cert without key", with("CERT_FILE", dir+"/notpem"), "go together"},
		{"user without password", with("USERNAME", "u"), pre + "USERNAME is set without"},
		{"password without user", with("PASSWORD", secret), "is set without " + pre + "USERNAME"},
		{"password twice", with("USERNAME", "u", "PASSWORD", secret, "PASSWORD_FILE", dir+"/empty"), "both set"},
		{"password file empty", with("USERNAME", "u", "PASSWORD_FILE", dir+"/empty"), "is empty"},
		{"token twice", with("TOKEN", secret, "TOKEN_FILE", dir+"/empty"), pre + "TOKEN and " + pre + "TOKEN_FILE are both set"},
		{"token and basic auth", with("TOKEN", secret, "USERNAME", "u", "PASSWORD", secret), "are both set: the registry takes one"},
		{"token file missing", with("TOKEN_FILE", dir+"/missing"), pre + "TOKEN_FILE=" + dir + "/missing cannot be read"},
		{"token file empty", with("TOKEN_FILE", dir+"/empty"), "is empty"},
		{"timeout", with("TIMEOUT", "10"), pre + "TIMEOUT=10 is not a positive duration"},
		{"negative TTL", with("CACHE_TTL", "-1m"), pre + "CACHE_TTL=-1m is not a positive duration"},
		{"cache size", with("CACHE_SIZE", "lots"), pre + "CACHE_SIZE=lots is not a whole number of at least 1"},
		{"cache size zero", with("CACHE_SIZE", "0"), pre + "CACHE_SIZE=0 is not a whole number of at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, problems := settings(tc.env)
			if len(problems) != 1 || !strings.Contains(problems[0], tc.want) {
				t.Errorf("SettingsFromEnv problems = %q; want one with %q", problems, tc.want)
			}
			for _, p := range problems {
				if strings.Contains(p, secret) {
					t.Errorf("problem %q shows the secret", p)
				}
			}
		})
	}
}
