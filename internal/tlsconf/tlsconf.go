// Package tlsconf reads a client's TLS settings and its secrets from the environment, the one
// way every millrace client of a secured server reads them: a CA bundle, a client certificate
// and key for mutual TLS, and secrets given inline or in a file (NAME_FILE, as Kubernetes
// mounts a Secret). The Kafka connection (internal/kafkaconn) reads FLOW_KAFKA_* with it, the
// schema-registry client its own prefix, so both check the same things the same way. Every
// problem names its variable and never shows a secret.
package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Vars names the variables of one client's TLS.
type Vars struct {
	// Enable is the boolean that turns TLS on; empty when the caller decides (an https URL),
	// and Read then returns a configuration whenever asked.
	Enable   string
	CAFile   string // PEM CA bundle for the server's certificate; system roots when unset
	CertFile string // client certificate, for mutual TLS
	KeyFile  string // the client certificate's key
}

// Read reads the TLS variables v through getenv, the files they name with readFile, checking
// the client certificate's validity at now, and reports every bad value through bad (one
// problem each, naming its variable). It returns nil when v.Enable is set and not true.
func Read(v Vars, getenv func(string) string, readFile func(string) ([]byte, error), now time.Time, bad func(string, ...any)) *tls.Config {
	caFile, certFile, keyFile := getenv(v.CAFile), getenv(v.CertFile), getenv(v.KeyFile)
	if v.Enable != "" {
		on := strings.TrimSpace(getenv(v.Enable))
		enabled := false
		if on != "" {
			b, err := strconv.ParseBool(on)
			if err != nil {
				bad("%s=%s is not a boolean (true or false)", v.Enable, on)
			}
			enabled = b
		}
		if !enabled {
			if caFile != "" || certFile != "" || keyFile != "" {
				bad("%s_* files are set but %s is not true: set %s=true or remove them", v.Enable, v.Enable, v.Enable)
			}
			return nil
		}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := readFile(caFile)
		if err != nil {
			bad("%s=%s cannot be read: %v", v.CAFile, caFile, err)
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				bad("%s=%s holds no PEM certificate", v.CAFile, caFile)
			}
			cfg.RootCAs = pool
		}
	}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "" || keyFile == "":
		bad("%s and %s go together: set both for a client certificate, or neither", v.CertFile, v.KeyFile)
	default:
		certPEM, err1 := readFile(certFile)
		keyPEM, err2 := readFile(keyFile)
		if err := errors.Join(err1, err2); err != nil {
			bad("the client certificate cannot be read (%s=%s, %s=%s): %v", v.CertFile, certFile, v.KeyFile, keyFile, err)
			break
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// X509KeyPair's errors name the PEM blocks, never the key's bytes.
			bad("%s=%s and %s=%s are not a certificate and its key: %v", v.CertFile, certFile, v.KeyFile, keyFile, err)
			break
		}
		if leaf := cert.Leaf; leaf != nil && now.After(leaf.NotAfter) {
			bad("%s=%s: the client certificate %q expired at %s: renew it", v.CertFile, certFile, leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
		} else if leaf != nil && now.Before(leaf.NotBefore) {
			bad("%s=%s: the client certificate %q is not valid before %s", v.CertFile, certFile, leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// Secret reads the secret of variable name, given inline in name or in the file name_FILE
// names, and returns it with the variable it came from ("" and "" when neither is set). Both
// set, an unreadable file or an empty one is a problem through bad. A file's trailing
// newline (a Secret written with echo) is no part of the secret.
func Secret(name string, getenv func(string) string, readFile func(string) ([]byte, error), bad func(string, ...any)) (value, from string) {
	fileVar := name + "_FILE"
	inline, file := getenv(name), getenv(fileVar)
	switch {
	case inline != "" && file != "":
		bad("%s and %s are both set: keep one", name, fileVar)
		return "", name
	case file != "":
		b, err := readFile(file)
		if err != nil {
			bad("%s=%s cannot be read: %v", fileVar, file, err)
			return "", fileVar
		}
		value = string(bytes.TrimRight(b, "\r\n"))
		if value == "" {
			bad("%s=%s is empty", fileVar, file)
		}
		return value, fileVar
	case inline != "":
		return inline, name
	}
	return "", ""
}

// Refusal is a failed TLS handshake explained: the variable to fix and how, naming no secret.
type Refusal struct{ Setting, Problem string }

// Explain maps a connection's error to the TLS variable of v to blame, for a client that
// dialed peer (what the problem calls it, e.g. "broker") with cfg; server is the variable
// naming the peer (e.g. FLOW_BROKERS), blamed when its certificate is for another host. ok is
// false when TLS is not to blame.
func Explain(err error, v Vars, cfg *tls.Config, peer, server string) (r Refusal, ok bool) {
	var (
		unknownCA x509.UnknownAuthorityError
		invalid   x509.CertificateInvalidError
		host      x509.HostnameError
		op        *net.OpError
	)
	switch {
	case errors.As(err, &unknownCA):
		return Refusal{v.CAFile, fmt.Sprintf("the %s's certificate is not signed by a CA the client trusts: set %s to the CA that signed it", peer, v.CAFile)}, true
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return Refusal{v.CAFile, fmt.Sprintf("the %s's certificate has expired or is not yet valid (or the client's clock is wrong): renew the %s's certificate", peer, peer)}, true
	case errors.As(err, &invalid):
		return Refusal{v.CAFile, fmt.Sprintf("the %s's certificate is not valid under %s", peer, v.CAFile)}, true
	case errors.As(err, &host):
		return Refusal{server, fmt.Sprintf("the %s's certificate is not for the host the client dialed: name it in %s as its certificate does", peer, server)}, true
	case cfg != nil && errors.As(err, &op) && op.Op == "remote error" && len(cfg.Certificates) == 0:
		// A TLS alert from the peer: it failed the handshake on its side, and with no client
		// certificate given, a demand for one is why.
		return Refusal{v.CertFile, fmt.Sprintf("the %s demands a client certificate (mutual TLS): set %s and %s", peer, v.CertFile, v.KeyFile)}, true
	case cfg != nil && errors.As(err, &op) && op.Op == "remote error":
		return Refusal{v.CertFile, fmt.Sprintf("the %s refused the TLS handshake, most likely the client certificate: set %s and %s to a valid certificate its CA signed", peer, v.CertFile, v.KeyFile)}, true
	}
	return Refusal{}, false
}
