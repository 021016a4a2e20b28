package schema

import "errors"

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

// Vars are the variables SettingsFromEnv reads, with their default and meaning, for the
// bridge's settings table and help texts.
var Vars = []struct{ Name, Default, Help string }{
	{envURL, "none", "schema registry URLs, comma-separated (http:// or https://)"},
	{envUsername, "none", "basic auth user (with MILLRACE_SCHEMA_REGISTRY_PASSWORD or _PASSWORD_FILE)"},
	{envPassword, "none", "basic auth password"},
	{envPasswordFile, "none", "file holding the basic auth password, e.g. a mounted Secret"},
	{envToken, "none", "bearer token"},
	{envTokenFile, "none", "file holding the bearer token, read again when it changes"},
	{envCAFile, "system roots", "PEM CA bundle for the registry's certificate"},
	{envCertFile, "none", "client certificate, for mutual TLS (with MILLRACE_SCHEMA_REGISTRY_KEY_FILE)"},
	{envKeyFile, "none", "client key (with MILLRACE_SCHEMA_REGISTRY_CERT_FILE)"},
	{envTimeout, "10s", "timeout of one request to the registry"},
	{envCacheSize, "1000", "schemas held in memory"},
	{envCacheTTL, "5m", "how long the latest version of a subject is trusted"},
}

// SettingsFromEnv reads the MILLRACE_SCHEMA_REGISTRY_* settings through getenv, reading the
// files they name with readFile, and reports every bad value through bad (one problem each,
// naming its variable). Secrets never appear in a problem. No URL is the zero Settings: no
// registry.
func SettingsFromEnv(getenv func(string) string, readFile func(string) ([]byte, error), bad func(string, ...any)) Settings {
	bad("%v", errors.New("schema: SettingsFromEnv: not yet"))
	return Settings{}
}
