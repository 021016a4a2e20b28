// Package kafkaconn is how millrace connects to a secured Kafka: it reads the FLOW_KAFKA_*
// settings (TLS, mutual TLS, SASL PLAIN, SCRAM and OAUTHBEARER), where every secret may come
// from a file as Kubernetes mounts a Secret, and checks a first connection so that a setting
// the broker refuses is named within seconds. The sidecar and `millrace replay` both read
// their connection here, so the two speak the same settings.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ankka-flow/millrace/internal/settings"
	"github.com/ankka-flow/millrace/internal/tlsconf"
)

// The settings' variables.
const (
	envTLS          = "FLOW_KAFKA_TLS"
	envTLSCAFile    = "FLOW_KAFKA_TLS_CA_FILE"
	envTLSCertFile  = "FLOW_KAFKA_TLS_CERT_FILE"
	envTLSKeyFile   = "FLOW_KAFKA_TLS_KEY_FILE"
	envMechanism    = "FLOW_KAFKA_SASL_MECHANISM"
	envUsername     = "FLOW_KAFKA_SASL_USERNAME"
	envPassword     = "FLOW_KAFKA_SASL_PASSWORD"
	envPasswordFile = "FLOW_KAFKA_SASL_PASSWORD_FILE"
	envTokenFile    = "FLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE"
)

// Vars are the variables FromEnv reads, with their default, meaning and docs text: rows of the
// sidecar's settings table, for its -h and docs/sidecar.md, and of `millrace replay -h`.
var Vars = []settings.Var{
	{Name: envTLS, Default: "false", Meaning: "true for TLS to the brokers", Doc: "`true` for TLS to the brokers (system roots unless a CA is given)", Literal: true},
	{Name: envTLSCAFile, Default: "system roots", Meaning: "PEM CA bundle for the brokers' certificates", Doc: "PEM CA bundle for the brokers' certificates"},
	{Name: envTLSCertFile, Default: "none", Meaning: "client certificate, for mutual TLS (with FLOW_KAFKA_TLS_KEY_FILE)", Doc: "client certificate, for mutual TLS (with `FLOW_KAFKA_TLS_KEY_FILE`: both or neither); an expired certificate is refused at start-up"},
	{Name: envTLSKeyFile, Default: "none", Meaning: "client key (with FLOW_KAFKA_TLS_CERT_FILE)", Doc: "client key, for mutual TLS (with `FLOW_KAFKA_TLS_CERT_FILE`)"},
	{Name: envMechanism, Default: "none", Meaning: "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", Doc: "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER`"},
	{Name: envUsername, Default: "none", Meaning: "SASL user (PLAIN and SCRAM)", Doc: "the SASL user (PLAIN and SCRAM)"},
	{Name: envPassword, Default: "none", Meaning: "SASL password (or FLOW_KAFKA_SASL_PASSWORD_FILE)", Doc: "the SASL password, or `FLOW_KAFKA_SASL_PASSWORD_FILE` (one of the two)"},
	{Name: envPasswordFile, Default: "none", Meaning: "file holding the SASL password, e.g. a mounted Secret", Doc: "a file holding the SASL password (a mounted Secret; one trailing newline is dropped)"},
	{Name: envTokenFile, Default: "none", Meaning: "OAUTHBEARER: file holding the token, read again at every authentication", Doc: "`OAUTHBEARER`: the file holding the token, read again at every authentication, so a rotated token (a projected service-account token) is used from the next connection on"},
}

// Settings are a connection's security: nil fields are off.
type Settings struct {
	TLS *tls.Config
	// SASL is an *Auth from FromEnv; any other sasl.Mechanism works, with plainer errors.
	SASL sasl.Mechanism
}

// Opts are the client options of the settings.
func (s Settings) Opts() []kgo.Opt {
	var opts []kgo.Opt
	if s.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(s.TLS))
	}
	if s.SASL != nil {
		opts = append(opts, kgo.SASL(s.SASL))
	}
	return opts
}

// Auth is a SASL mechanism with what an error may say about it: the user and the setting the
// secret came from, never the secret.
type Auth struct {
	sasl.Mechanism
	User   string // empty for OAUTHBEARER
	Secret string // the variable holding the secret: the password, its file or the token file
}

// String keeps the secret out of any %v of a configuration.
func (a *Auth) String() string { return a.Mechanism.Name() + " as " + strconv.Quote(a.User) }

// FromEnv reads the settings through getenv, reading the files they name with readFile, and
// reports every bad value through bad (one problem each, naming its variable). Secrets never
// appear in a problem.
func FromEnv(getenv func(string) string, readFile func(string) ([]byte, error), bad func(string, ...any)) Settings {
	return Settings{TLS: tlsconf.Read(tlsVars, getenv, readFile, time.Now(), bad), SASL: parseSASL(getenv, readFile, bad)}
}

// tlsVars are the FLOW_KAFKA_TLS* variables.
var tlsVars = tlsconf.Vars{Enable: envTLS, CAFile: envTLSCAFile, CertFile: envTLSCertFile, KeyFile: envTLSKeyFile}

// parseSASL reads the FLOW_KAFKA_SASL_* variables: nil when SASL is off.
func parseSASL(getenv func(string) string, readFile func(string) ([]byte, error), bad func(string, ...any)) sasl.Mechanism {
	mech := strings.ToUpper(strings.TrimSpace(getenv(envMechanism)))
	user, tokenFile := getenv(envUsername), getenv(envTokenFile)
	passSet := getenv(envPassword) != "" || getenv(envPasswordFile) != ""
	if mech == "" {
		if user != "" || passSet || tokenFile != "" {
			bad("FLOW_KAFKA_SASL_* variables are set but %s is not: set it to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", envMechanism)
		}
		return nil
	}
	if mech == "OAUTHBEARER" {
		if user != "" || passSet {
			bad("%s=OAUTHBEARER takes a token, not a user and password: remove %s and %s(_FILE)", envMechanism, envUsername, envPassword)
		}
		if tokenFile == "" {
			bad("%s=OAUTHBEARER needs %s, the file holding the token", envMechanism, envTokenFile)
			return nil
		}
		if _, err := readToken(readFile, tokenFile); err != nil {
			bad("%v", err)
		}
		return &Auth{Mechanism: oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := readToken(readFile, tokenFile)
			return oauth.Auth{Token: tok}, err
		}), Secret: envTokenFile}
	}
	if tokenFile != "" {
		bad("%s is only for OAUTHBEARER, not %s", envTokenFile, mech)
	}
	pass, secret := tlsconf.Secret(envPassword, getenv, readFile, bad)
	if user == "" || secret == "" {
		bad("%s=%s needs %s and %s (or %s)", envMechanism, mech, envUsername, envPassword, envPasswordFile)
	}
	var m sasl.Mechanism
	switch mech {
	case "PLAIN":
		m = plain.Auth{User: user, Pass: pass}.AsMechanism()
	case "SCRAM-SHA-256":
		m = scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		m = scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	default:
		bad("%s=%s is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", envMechanism, mech)
		return nil
	}
	return &Auth{Mechanism: m, User: user, Secret: secret}
}

// readToken reads the OAUTHBEARER token; the file is read at every authentication, so a
// rotated token (a projected service-account token) is used from the next one on.
func readToken(readFile func(string) ([]byte, error), file string) (string, error) {
	b, err := readFile(file)
	if err != nil {
		return "", fmt.Errorf("%s=%s cannot be read: %w", envTokenFile, file, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s=%s is empty", envTokenFile, file)
	}
	return tok, nil
}
