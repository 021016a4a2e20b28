package schema

import (
	"net/url"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/internal/settings"
	"github.com/ankka-flow/millrace/internal/tlsconf"
)

// The settings' variables, the bridge's.
const (
	envURL          = "MILLRACE_SCHEMA_REGISTRY_URL"
	envUsername     = "MILLRACE_SCHEMA_REGISTRY_USERNAME"
	envPassword     = "MILLRACE_SCHEMA_REGISTRY_PASSWORD"
	envPasswordFile = "MILLRACE_SCHEMA_REGISTRY_PASSWORD_FILE"
	envToken        = "MILLRACE_SCHEMA_REGISTRY_TOKEN"
	envTokenFile    = "MILLRACE_SCHEMA_REGISTRY_TOKEN_FILE"
	envCAFile       = "MILLRACE_SCHEMA_REGISTRY_CA_FILE"
	envCertFile     = "MILLRACE_SCHEMA_REGISTRY_CERT_FILE"
	envKeyFile      = "MILLRACE_SCHEMA_REGISTRY_KEY_FILE"
	envTimeout      = "MILLRACE_SCHEMA_REGISTRY_TIMEOUT"
	envCacheSize    = "MILLRACE_SCHEMA_REGISTRY_CACHE_SIZE"
	envCacheTTL     = "MILLRACE_SCHEMA_REGISTRY_CACHE_TTL"
)

// Vars are the variables SettingsFromEnv reads, with their default, meaning and docs text:
// rows of the bridge's settings table, for its -h and docs/action-config.md.
var Vars = []settings.Var{
	{Name: envURL, Default: "—", Meaning: "schema registry URLs, comma-separated (http:// or https://)", Doc: "the schema registry's URLs, comma-separated (`http://` or `https://`), for the ports of `--decode`/`--encode` ([docs/encoded-topics.md](encoded-topics.md)); a line with such a port and no URL is a start error; plain ports never contact it"},
	{Name: envUsername, Default: "—", Meaning: "basic auth user (with MILLRACE_SCHEMA_REGISTRY_PASSWORD or _PASSWORD_FILE)", Doc: "basic auth user, with `_PASSWORD` or `_PASSWORD_FILE` (a mounted Secret)"},
	{Name: envPassword, Default: "—", Meaning: "basic auth password", Doc: "basic auth password"},
	{Name: envPasswordFile, Default: "—", Meaning: "file holding the basic auth password, e.g. a mounted Secret", Doc: "file holding the basic auth password"},
	{Name: envToken, Default: "—", Meaning: "bearer token", Doc: "bearer token"},
	{Name: envTokenFile, Default: "—", Meaning: "file holding the bearer token, read again when it changes", Doc: "file holding the bearer token, read again when it changes"},
	{Name: envCAFile, Default: "system roots", Meaning: "PEM CA bundle for the registry's certificate", Doc: "PEM CA bundle for the registry's certificate"},
	{Name: envCertFile, Default: "—", Meaning: "client certificate, for mutual TLS (with MILLRACE_SCHEMA_REGISTRY_KEY_FILE)", Doc: "client certificate for mutual TLS, with `_KEY_FILE`"},
	{Name: envKeyFile, Default: "—", Meaning: "client key (with MILLRACE_SCHEMA_REGISTRY_CERT_FILE)", Doc: "client key, with `_CERT_FILE`"},
	{Name: envTimeout, Default: "10s", Meaning: "timeout of one request to the registry", Doc: "timeout of one request to the registry; one that does not answer is retried with backoff for 30 s, then the batch is failed (nothing committed, redelivered)", Literal: true},
	{Name: envCacheSize, Default: "1000", Meaning: "schemas held in memory", Doc: "schemas held in memory (by id, for ever within the size)", Literal: true},
	{Name: envCacheTTL, Default: "5m", Meaning: "how long the latest version of a subject is trusted", Doc: "how long the latest version of a subject is trusted", Literal: true},
}

// tlsVars are the registry client's TLS variables: TLS is on for an https URL.
var tlsVars = tlsconf.Vars{CAFile: envCAFile, CertFile: envCertFile, KeyFile: envKeyFile}

// SettingsFromEnv reads the MILLRACE_SCHEMA_REGISTRY_* settings through getenv, reading the
// files they name with readFile, and reports every bad value through bad (one problem each,
// naming its variable). Secrets never appear in a problem. No URL (and no other variable) is
// the zero Settings: no registry. TLS, basic auth passwords and NAME_FILE secrets are read as
// internal/kafkaconn reads them (package tlsconf); the token file is read again when it
// changes, so only its first reading is checked here.
func SettingsFromEnv(getenv func(string) string, readFile func(string) ([]byte, error), bad func(string, ...any)) Settings {
	var s Settings
	https := false
	for _, u := range strings.Split(getenv(envURL), ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		p, err := url.Parse(u)
		switch {
		case err != nil:
			bad("%s: %q is not a URL: %v", envURL, u, err)
			continue
		case p.Scheme != "http" && p.Scheme != "https":
			bad("%s: %q is not an http:// or https:// URL", envURL, u)
			continue
		case p.Host == "":
			bad("%s: %q names no host", envURL, u)
			continue
		case p.User != nil:
			bad("%s: %q carries credentials: give them in %s and %s", envURL, p.Redacted(), envUsername, envPassword)
			continue
		}
		https = https || p.Scheme == "https"
		s.URLs = append(s.URLs, u)
	}
	if len(s.URLs) == 0 {
		for _, v := range Vars[1:] {
			if getenv(v.Name) != "" {
				bad("%s is set but %s is not: set the registry's URL, or remove the %s_* settings", v.Name, envURL, envURL[:len(envURL)-len("_URL")])
				return Settings{}
			}
		}
		return Settings{}
	}

	switch {
	case https:
		s.TLS = tlsconf.Read(tlsVars, getenv, readFile, time.Now(), bad)
	case getenv(envCAFile) != "" || getenv(envCertFile) != "" || getenv(envKeyFile) != "":
		bad("%s, %s or %s is set but %s has no https:// URL: use https, or remove them", envCAFile, envCertFile, envKeyFile, envURL)
	}

	s.Username = getenv(envUsername)
	pass, _ := tlsconf.Secret(envPassword, getenv, readFile, bad)
	s.Password = pass
	token, tokenFile := getenv(envToken), getenv(envTokenFile)
	switch {
	case s.Username == "" && getenv(envPassword)+getenv(envPasswordFile) != "":
		bad("%s(_FILE) is set without %s: set the user too", envPassword, envUsername)
	case s.Username != "" && getenv(envPassword)+getenv(envPasswordFile) == "":
		bad("%s is set without %s or %s", envUsername, envPassword, envPasswordFile)
	}
	switch {
	case token != "" && tokenFile != "":
		bad("%s and %s are both set: keep one", envToken, envTokenFile)
	case (token != "" || tokenFile != "") && s.Username != "":
		bad("basic auth (%s) and a bearer token (%s or %s) are both set: the registry takes one, keep it", envUsername, envToken, envTokenFile)
	case tokenFile != "":
		b, err := readFile(tokenFile)
		if err != nil {
			bad("%s=%s cannot be read: %v", envTokenFile, tokenFile, err)
		} else if strings.TrimSpace(string(b)) == "" {
			bad("%s=%s is empty", envTokenFile, tokenFile)
		}
		s.TokenFile = tokenFile
	default:
		s.BearerToken = token
	}

	// The numbers are read by the house's own Reader, so that they take the forms, and refuse
	// the values, that every other setting of the bridge does.
	r := settings.NewReader(getenv)
	s.Timeout = r.Duration(envTimeout, DefaultTimeout, time.Nanosecond)
	s.CacheTTL = r.Duration(envCacheTTL, DefaultCacheTTL, time.Nanosecond)
	s.CacheSize = r.Int(envCacheSize, DefaultCacheSize, 1)
	for _, p := range r.Problems() {
		bad("%s", p)
	}
	return s
}
