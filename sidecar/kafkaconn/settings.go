// Package kafkaconn is how millrace connects to a secured Kafka: it reads the FLOW_KAFKA_*
// settings (TLS, mutual TLS, SASL PLAIN, SCRAM and OAUTHBEARER), where every secret may come
// from a file as Kubernetes mounts a Secret, and checks a first connection so that a setting
// the broker refuses is named within seconds. The sidecar and `millrace replay` both read
// their connection here, so the two speak the same settings.
package kafkaconn

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
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

// Vars are the variables FromEnv reads, with their default and meaning, for help texts.
var Vars = []struct{ Name, Default, Help string }{
	{envTLS, "false", "true for TLS to the brokers"},
	{envTLSCAFile, "system roots", "PEM CA bundle for the brokers' certificates"},
	{envTLSCertFile, "none", "client certificate, for mutual TLS (with FLOW_KAFKA_TLS_KEY_FILE)"},
	{envTLSKeyFile, "none", "client key (with FLOW_KAFKA_TLS_CERT_FILE)"},
	{envMechanism, "none", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"},
	{envUsername, "none", "SASL user (PLAIN and SCRAM)"},
	{envPassword, "none", "SASL password (or FLOW_KAFKA_SASL_PASSWORD_FILE)"},
	{envPasswordFile, "none", "file holding the SASL password, e.g. a mounted Secret"},
	{envTokenFile, "none", "OAUTHBEARER: file holding the token, read again at every authentication"},
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
	return Settings{TLS: parseTLS(getenv, readFile, time.Now(), bad), SASL: parseSASL(getenv, readFile, bad)}
}

// parseTLS reads the FLOW_KAFKA_TLS_* variables: nil when TLS is off.
func parseTLS(getenv func(string) string, readFile func(string) ([]byte, error), now time.Time, bad func(string, ...any)) *tls.Config {
	on := strings.TrimSpace(getenv(envTLS))
	caFile, certFile, keyFile := getenv(envTLSCAFile), getenv(envTLSCertFile), getenv(envTLSKeyFile)
	enabled := false
	if on != "" {
		b, err := strconv.ParseBool(on)
		if err != nil {
			bad("%s=%s is not a boolean (true or false)", envTLS, on)
		}
		enabled = b
	}
	if !enabled {
		if caFile != "" || certFile != "" || keyFile != "" {
			bad("FLOW_KAFKA_TLS_* files are set but FLOW_KAFKA_TLS is not true: set FLOW_KAFKA_TLS=true or remove them")
		}
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := readFile(caFile)
		if err != nil {
			bad("%s=%s cannot be read: %v", envTLSCAFile, caFile, err)
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				bad("%s=%s holds no PEM certificate", envTLSCAFile, caFile)
			}
			cfg.RootCAs = pool
		}
	}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "" || keyFile == "":
		bad("FLOW_KAFKA_TLS_CERT_FILE and FLOW_KAFKA_TLS_KEY_FILE go together: set both for a client certificate, or neither")
	default:
		certPEM, err1 := readFile(certFile)
		keyPEM, err2 := readFile(keyFile)
		if err := errors.Join(err1, err2); err != nil {
			bad("the client certificate cannot be read (%s=%s, %s=%s): %v", envTLSCertFile, certFile, envTLSKeyFile, keyFile, err)
			break
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// X509KeyPair's errors name the PEM blocks, never the key's bytes.
			bad("%s=%s and %s=%s are not a certificate and its key: %v", envTLSCertFile, certFile, envTLSKeyFile, keyFile, err)
			break
		}
		if leaf := cert.Leaf; leaf != nil && now.After(leaf.NotAfter) {
			bad("%s=%s: the client certificate %q expired at %s: renew it", envTLSCertFile, certFile, leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
		} else if leaf != nil && now.Before(leaf.NotBefore) {
			bad("%s=%s: the client certificate %q is not valid before %s", envTLSCertFile, certFile, leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// parseSASL reads the FLOW_KAFKA_SASL_* variables: nil when SASL is off.
func parseSASL(getenv func(string) string, readFile func(string) ([]byte, error), bad func(string, ...any)) sasl.Mechanism {
	mech := strings.ToUpper(strings.TrimSpace(getenv(envMechanism)))
	user, pass, passFile, tokenFile := getenv(envUsername), getenv(envPassword), getenv(envPasswordFile), getenv(envTokenFile)
	if mech == "" {
		if user != "" || pass != "" || passFile != "" || tokenFile != "" {
			bad("FLOW_KAFKA_SASL_* variables are set but %s is not: set it to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", envMechanism)
		}
		return nil
	}
	if mech == "OAUTHBEARER" {
		if user != "" || pass != "" || passFile != "" {
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
	secret := envPassword
	switch {
	case pass != "" && passFile != "":
		bad("%s and %s are both set: keep one", envPassword, envPasswordFile)
	case passFile != "":
		secret = envPasswordFile
		b, err := readFile(passFile)
		if err != nil {
			bad("%s=%s cannot be read: %v", envPasswordFile, passFile, err)
			break
		}
		// A Secret written with echo ends in a newline that is no part of the password.
		pass = string(bytes.TrimRight(b, "\r\n"))
		if pass == "" {
			bad("%s=%s is empty", envPasswordFile, passFile)
		}
	}
	if user == "" || (pass == "" && passFile == "") {
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
