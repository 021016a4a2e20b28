package testkit

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// A secured broker's users: the admin the test's own clients are, and the client under test
// (a sidecar, a replay), whose password is known so that a test can look for it in outputs.
const (
	SecuredAdmin, SecuredAdminPassword = "admin", "admin-pw"
	SecuredUser, SecuredPassword       = "millrace", "Known-Secret-7f3a9c"
)

// Security is what a secured kfake demands of a client beyond TLS, which it always demands.
type Security struct {
	MutualTLS bool   // a client certificate its CA signed
	Mechanism string // the SASL mechanism SecuredUser authenticates with ("" for none)
	// ACLs, when non-nil, are enforced: SecuredUser is then an ordinary user holding them
	// (otherwise a superuser).
	ACLs   []kfake.ACL
	Client []kgo.Opt // the admin client's own options, as BrokerOptions.Client
}

// NewSecuredBroker starts a kfake that refuses anything less than sec, with a CA the test
// generates, and returns it with the FLOW_KAFKA_* variables that reach it as SecuredUser (the
// password from a file). Its admin and readers connect as SecuredAdmin.
func NewSecuredBroker(t testing.TB, sec Security) (*Broker, map[string]string) {
	t.Helper()
	ca := NewCA(t, "kafka")
	var clients *CA
	if sec.MutualTLS {
		clients = ca
	}
	kf := []kfake.Opt{kfake.TLS(ServerTLS(ca.Issue(t, "kfake", time.Time{}, time.Time{}), clients))}
	clientTLS := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	vars := map[string]string{"FLOW_KAFKA_TLS": "true", "FLOW_KAFKA_TLS_CA_FILE": ca.File}
	if sec.MutualTLS {
		p := ca.Issue(t, "client", time.Time{}, time.Time{})
		clientTLS.Certificates = []tls.Certificate{p.TLS}
		vars["FLOW_KAFKA_TLS_CERT_FILE"], vars["FLOW_KAFKA_TLS_KEY_FILE"] = p.CertFile, p.KeyFile
	}
	conn := []kgo.Opt{kgo.DialTLSConfig(clientTLS)}
	if sec.Mechanism != "" {
		kf = append(kf, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", SecuredAdmin, SecuredAdminPassword))
		if sec.ACLs != nil {
			kf = append(kf, kfake.EnableACLs(), kfake.User(sec.Mechanism, SecuredUser, SecuredPassword, sec.ACLs...))
		} else {
			kf = append(kf, kfake.Superuser(sec.Mechanism, SecuredUser, SecuredPassword))
		}
		conn = append(conn, kgo.SASL(scram.Auth{User: SecuredAdmin, Pass: SecuredAdminPassword}.AsSha256Mechanism()))
		pw := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(pw, []byte(SecuredPassword+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		vars["FLOW_KAFKA_SASL_MECHANISM"], vars["FLOW_KAFKA_SASL_USERNAME"], vars["FLOW_KAFKA_SASL_PASSWORD_FILE"] = sec.Mechanism, SecuredUser, pw
	}
	b := NewBroker(t, BrokerOptions{KfakeOnly: true, Kfake: kf, Conn: conn, Client: sec.Client})
	return b, vars
}
