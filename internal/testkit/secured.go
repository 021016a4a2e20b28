package testkit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// The secured Kafka 4 broker of `MILLRACE_KAFKA_SECURED=1 scripts/kafka start`: its client
// listener, and its home, where tls/ca.crt is the CA of its certificate.
const (
	EnvSecuredBrokers = "MILLRACE_KAFKA_SECURED_BROKERS"
	EnvSecuredHome    = "MILLRACE_KAFKA_SECURED_HOME"
)

// securedLimitedUser is the secured Kafka's user that holds only the ACLs a test grants
// (SecuredUser is a superuser there, as on kfake without ACLs).
const securedLimitedUser = "millrace-limited"

// SecuredKafka reports whether EnvSecuredBrokers names a secured Kafka broker.
func SecuredKafka() bool { return os.Getenv(EnvSecuredBrokers) != "" }

// NewSecuredBroker starts a kfake that refuses anything less than sec, with a CA the test
// generates, and returns it with the FLOW_KAFKA_* variables that reach it as SecuredUser (the
// password from a file). Its admin and readers connect as SecuredAdmin. When EnvSecuredBrokers
// names a secured Kafka and sec asks for what its SASL_SSL listener serves (SASL, no client
// certificate), that broker is used instead; Broker.Principal is the user the variables name.
func NewSecuredBroker(t testing.TB, sec Security) (*Broker, map[string]string) {
	t.Helper()
	if SecuredKafka() && sec.Mechanism != "" && !sec.MutualTLS {
		return securedKafka(t, sec)
	}
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
	b.Principal = "User:" + SecuredUser
	return b, vars
}

// securedKafka is NewSecuredBroker on the secured Kafka broker: sec.ACLs are granted to the
// limited user by the admin.
func securedKafka(t testing.TB, sec Security) (*Broker, map[string]string) {
	t.Helper()
	caFile := filepath.Join(os.Getenv(EnvSecuredHome), "tls", "ca.crt")
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatalf("testkit: the secured Kafka's CA (%s/tls/ca.crt): %v", EnvSecuredHome, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	conn := []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: SecuredAdmin, Pass: SecuredAdminPassword}.AsSha512Mechanism())}
	user := SecuredUser
	if sec.ACLs != nil {
		user = securedLimitedUser
	}
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte(SecuredPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"FLOW_KAFKA_TLS": "true", "FLOW_KAFKA_TLS_CA_FILE": caFile,
		"FLOW_KAFKA_SASL_MECHANISM": sec.Mechanism, "FLOW_KAFKA_SASL_USERNAME": user, "FLOW_KAFKA_SASL_PASSWORD_FILE": pw}
	if sec.Mechanism == "OAUTHBEARER" {
		delete(vars, "FLOW_KAFKA_SASL_USERNAME")
		delete(vars, "FLOW_KAFKA_SASL_PASSWORD_FILE")
		vars["FLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE"] = UnsecuredToken(t, user)
	}
	b := &Broker{Addrs: strings.Split(os.Getenv(EnvSecuredBrokers), ","), conn: conn, Principal: "User:" + user}
	admin, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(b.Addrs...)}, conn...), sec.Client...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	b.Admin = admin
	for _, a := range sec.ACLs {
		b.GrantACL(t, a)
	}
	return b, vars
}

// GrantACL adds acl for the broker's Principal, as the admin.
func (b *Broker) GrantACL(t testing.TB, acl kfake.ACL) {
	t.Helper()
	acls := kadm.NewACLs().Allow(b.Principal).AllowHosts("*").Operations(acl.Operation).ResourcePatternType(acl.Pattern)
	switch acl.Resource {
	case kmsg.ACLResourceTypeTopic:
		acls.Topics(acl.Name)
	case kmsg.ACLResourceTypeGroup:
		acls.Groups(acl.Name)
	case kmsg.ACLResourceTypeTransactionalId:
		acls.TransactionalIDs(acl.Name)
	case kmsg.ACLResourceTypeCluster:
		acls.Clusters()
	default:
		t.Fatalf("testkit: granting %v: no resource type %v in GrantACL", acl, acl.Resource)
	}
	created, err := kadm.NewClient(b.Admin).CreateACLs(context.Background(), acls)
	for _, c := range created {
		if err == nil {
			err = c.Err
		}
	}
	if err == nil && len(created) != 1 {
		err = fmt.Errorf("%d ACLs created; want 1", len(created))
	}
	if err != nil {
		t.Fatalf("testkit: granting %v to %s: %v", acl, b.Principal, err)
	}
}

// UnsecuredToken writes an unsecured JWT for sub (Kafka's built-in OAUTHBEARER validator for
// tests accepts alg "none") to a file and returns its path.
func UnsecuredToken(t testing.TB, sub string) string {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	now := time.Now().Unix()
	tok := enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(fmt.Sprintf(`{"sub":%q,"iat":%d,"exp":%d}`, sub, now, now+3600))) + "."
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
