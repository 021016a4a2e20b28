package sidecar

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// parseTLS reads the FLOW_KAFKA_TLS_* variables: nil when TLS is off.
func parseTLS(getenv func(string) string, readFile func(string) ([]byte, error), bad func(string, ...any)) *tls.Config {
	on := strings.TrimSpace(getenv("FLOW_KAFKA_TLS"))
	caFile, certFile, keyFile := getenv("FLOW_KAFKA_TLS_CA_FILE"), getenv("FLOW_KAFKA_TLS_CERT_FILE"), getenv("FLOW_KAFKA_TLS_KEY_FILE")
	enabled := false
	if on != "" {
		b, err := strconv.ParseBool(on)
		if err != nil {
			bad("FLOW_KAFKA_TLS=%s is not a boolean (true or false)", on)
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
			bad("FLOW_KAFKA_TLS_CA_FILE=%s cannot be read: %v", caFile, err)
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				bad("FLOW_KAFKA_TLS_CA_FILE=%s holds no PEM certificate", caFile)
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
			bad("the client certificate cannot be read (FLOW_KAFKA_TLS_CERT_FILE=%s, FLOW_KAFKA_TLS_KEY_FILE=%s): %v", certFile, keyFile, err)
			break
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			bad("FLOW_KAFKA_TLS_CERT_FILE=%s and FLOW_KAFKA_TLS_KEY_FILE=%s are not a certificate and its key: %v", certFile, keyFile, err)
			break
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

func parseSASL(getenv func(string) string, bad func(string, ...any)) sasl.Mechanism {
	mech := strings.ToUpper(strings.TrimSpace(getenv("FLOW_KAFKA_SASL_MECHANISM")))
	user, pass := getenv("FLOW_KAFKA_SASL_USERNAME"), getenv("FLOW_KAFKA_SASL_PASSWORD")
	if mech == "" {
		if user != "" || pass != "" {
			bad("FLOW_KAFKA_SASL_USERNAME/PASSWORD are set but FLOW_KAFKA_SASL_MECHANISM is not: set it to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
		return nil
	}
	if user == "" || pass == "" {
		bad("FLOW_KAFKA_SASL_MECHANISM=%s needs FLOW_KAFKA_SASL_USERNAME and FLOW_KAFKA_SASL_PASSWORD", mech)
	}
	switch mech {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	}
	bad("FLOW_KAFKA_SASL_MECHANISM=%s is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mech)
	return nil
}
