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
	securedAdmin, securedAdminPassword = "admin", "admin-pw"
	SecuredUser, SecuredPassword       = "millrace", "Known-Secret-7f3a9c"
)

// Security is what a secured kfake demands of a client beyond TLS, which it always demands.
type Security struct {
	MutualTLS bool   // a client certificate its CA signed
	Mechanism string // the SASL mechanism SecuredUser authenticates with ("" for none)
	// ACLs, when non-nil, are enforced: SecuredUser is then an ordinary user holding them
	// (otherwise a superuser).
	ACLs   []kfake.ACL
	Client []kgo.Opt   // the admin client's own options, as BrokerOptions.Client
	Kfake  []kfake.Opt // more options of the kfake; given, the broker is a kfake whatever the environment
}

// The secured Kafka 4 broker of `MILLRACE_KAFKA_SECURED=1 scripts/kafka start`: its SASL_SSL
// client listener, its mutual TLS listener, and its home, where tls/ca.crt is the CA of its
// certificate and tls/client.{crt,key} the client certificate the mutual TLS listener takes.
const (
	EnvSecuredBrokers     = "MILLRACE_KAFKA_SECURED_BROKERS"
	envSecuredMTLSBrokers = "MILLRACE_KAFKA_SECURED_MTLS_BROKERS"
	EnvSecuredHome        = "MILLRACE_KAFKA_SECURED_HOME"
)

// securedMTLSPrincipal is the principal of the secured Kafka's client certificate.
const securedMTLSPrincipal = "User:CN=millrace-client"

// securedLimitedUser is the secured Kafka's user that holds only the ACLs a test grants
// (SecuredUser is a superuser there, as on kfake without ACLs).
const securedLimitedUser = "millrace-limited"

// SecuredKafka reports whether EnvSecuredBrokers names a secured Kafka broker.
func SecuredKafka() bool { return os.Getenv(EnvSecuredBrokers) != "" }

// mtlsListener reports whether envSecuredMTLSBrokers names the secured Kafka's mutual TLS
// listener.
func mtlsListener() bool { return os.Getenv(envSecuredMTLSBrokers) != "" }

// NewSecuredBroker starts a kfake that refuses anything less than sec, with a CA the test
// generates, and returns it with the FLOW_KAFKA_* variables that reach it as SecuredUser (the
// password from a file). Its admin and readers connect as securedAdmin. When EnvSecuredBrokers
// names a secured Kafka and sec asks for what its SASL_SSL listener serves (SASL, no client
// certificate), that broker is used instead, and its mutual TLS listener when
// envSecuredMTLSBrokers names it and sec asks for a client certificate alone, without ACLs;
// Broker.Principal is the user the variables name.
func NewSecuredBroker(t testing.TB, sec Security) (*Broker, map[string]string) {
	t.Helper()
	if SecuredKafka() && sec.Mechanism != "" && !sec.MutualTLS && sec.Kfake == nil {
		return securedKafka(t, sec)
	}
	if mtlsListener() && sec.MutualTLS && sec.Mechanism == "" && sec.ACLs == nil && sec.Kfake == nil {
		return securedKafkaMTLS(t, sec)
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
		kf = append(kf, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", securedAdmin, securedAdminPassword))
		if sec.ACLs != nil {
			kf = append(kf, kfake.EnableACLs(), kfake.User(sec.Mechanism, SecuredUser, SecuredPassword, sec.ACLs...))
		} else {
			kf = append(kf, kfake.Superuser(sec.Mechanism, SecuredUser, SecuredPassword))
		}
		conn = append(conn, kgo.SASL(scram.Auth{User: securedAdmin, Pass: securedAdminPassword}.AsSha256Mechanism()))
		pw := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(pw, []byte(SecuredPassword+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		vars["FLOW_KAFKA_SASL_MECHANISM"], vars["FLOW_KAFKA_SASL_USERNAME"], vars["FLOW_KAFKA_SASL_PASSWORD_FILE"] = sec.Mechanism, SecuredUser, pw
	}
	b := NewBroker(t, BrokerOptions{KfakeOnly: true, Kfake: append(kf, sec.Kfake...), Conn: conn, Client: sec.Client})
	b.Principal = "User:" + SecuredUser
	return b, vars
}

// securedCA is the secured Kafka's CA: its file and a pool holding it.
func securedCA(t testing.TB) (string, *x509.CertPool) {
	t.Helper()
	caFile := filepath.Join(os.Getenv(EnvSecuredHome), "tls", "ca.crt")
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatalf("testkit: the secured Kafka's CA (%s/tls/ca.crt): %v", EnvSecuredHome, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return caFile, pool
}

// securedKafkaMTLS is NewSecuredBroker on the secured Kafka's mutual TLS listener: the test's
// clients and the client under test present the certificate the script made.
func securedKafkaMTLS(t testing.TB, sec Security) (*Broker, map[string]string) {
	t.Helper()
	caFile, pool := securedCA(t)
	dir := filepath.Join(os.Getenv(EnvSecuredHome), "tls")
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("testkit: the secured Kafka's client certificate (%s/tls/client.*): %v", EnvSecuredHome, err)
	}
	conn := []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})}
	vars := map[string]string{"FLOW_KAFKA_TLS": "true", "FLOW_KAFKA_TLS_CA_FILE": caFile,
		"FLOW_KAFKA_TLS_CERT_FILE": certFile, "FLOW_KAFKA_TLS_KEY_FILE": keyFile}
	return securedKafkaBroker(t, envSecuredMTLSBrokers, conn, securedMTLSPrincipal, sec), vars
}

// securedKafkaBroker is a Broker on the secured Kafka's listener in env, its admin connecting
// with conn.
func securedKafkaBroker(t testing.TB, env string, conn []kgo.Opt, principal string, sec Security) *Broker {
	t.Helper()
	b := &Broker{Addrs: strings.Split(os.Getenv(env), ","), conn: conn, Principal: principal}
	admin, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(b.Addrs...)}, conn...), sec.Client...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	b.Admin = admin
	for _, a := range sec.ACLs {
		b.GrantACL(t, a)
	}
	return b
}

// securedKafka is NewSecuredBroker on the secured Kafka broker: sec.ACLs are granted to the
// limited user by the admin.
func securedKafka(t testing.TB, sec Security) (*Broker, map[string]string) {
	t.Helper()
	caFile, pool := securedCA(t)
	conn := []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: securedAdmin, Pass: securedAdminPassword}.AsSha512Mechanism())}
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
		vars["FLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE"] = unsecuredToken(t, user)
	}
	return securedKafkaBroker(t, EnvSecuredBrokers, conn, "User:"+user, sec), vars
}

// GrantACL adds acl for the broker's Principal, as the admin.
func (b *Broker) GrantACL(t testing.TB, acl kfake.ACL) {
	t.Helper()
	created, err := kadm.NewClient(b.Admin).CreateACLs(context.Background(), b.aclOf(t, acl))
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

// RevokeACL removes acl from the broker's Principal, as the admin: a permission taken away
// while a client runs.
func (b *Broker) RevokeACL(t testing.TB, acl kfake.ACL) {
	t.Helper()
	deleted, err := kadm.NewClient(b.Admin).DeleteACLs(context.Background(), b.aclOf(t, acl))
	n := 0
	for _, d := range deleted {
		if err == nil {
			err = d.Err
		}
		n += len(d.Deleted)
	}
	if err == nil && n != 1 {
		err = fmt.Errorf("%d ACLs deleted; want 1", n)
	}
	if err != nil {
		t.Fatalf("testkit: revoking %v from %s: %v", acl, b.Principal, err)
	}
}

// aclOf is acl for the broker's Principal from any host, as kadm builds it.
func (b *Broker) aclOf(t testing.TB, acl kfake.ACL) *kadm.ACLBuilder {
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
		t.Fatalf("testkit: ACL %v: no resource type %v in aclOf", acl, acl.Resource)
	}
	return acls
}

// unsecuredToken writes an unsecured JWT for sub (Kafka's built-in OAUTHBEARER validator for
// tests accepts alg "none"), valid for an hour, to a file and returns its path.
func unsecuredToken(t testing.TB, sub string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "token")
	WriteUnsecuredToken(t, file, sub, time.Now().Add(time.Hour))
	return file
}

// WriteUnsecuredToken writes to file an unsecured JWT for sub that expires at exp, replacing
// the file's token at once (a rename), as a projected service-account token rotates.
func WriteUnsecuredToken(t testing.TB, file, sub string, exp time.Time) {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	claims := fmt.Sprintf(`{"sub":%q,"iat":%d,"exp":%d}`, sub, time.Now().Unix(), exp.Unix())
	tok := enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(claims)) + "."
	tmp := file + ".new"
	if err := os.WriteFile(tmp, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}
