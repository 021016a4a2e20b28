package kafkaconn_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// secured starts a kfake that demands TLS (mutual when mtls) and, when mech is set, SASL with
// user alice; it returns its address and the CA that signed its certificate.
func secured(t *testing.T, mtls bool, mech string) (string, *testkit.CA) {
	return securedUntil(t, mtls, mech, time.Time{})
}

// securedUntil is secured with the broker's certificate valid until notAfter (zero: a day).
func securedUntil(t *testing.T, mtls bool, mech string, notAfter time.Time) (string, *testkit.CA) {
	t.Helper()
	ca := testkit.NewCA(t, "broker")
	var clients *testkit.CA
	if mtls {
		clients = ca
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.TLS(testkit.ServerTLS(ca.Issue(t, "kfake", time.Time{}, notAfter), clients))}
	if mech != "" {
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(mech, "alice", "s3cret-pw"))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0], ca
}

func settings(t *testing.T, env map[string]string) kafkaconn.Settings {
	t.Helper()
	var problems []string
	s := kafkaconn.FromEnv(func(k string) string { return env[k] }, os.ReadFile, func(f string, a ...any) {
		problems = append(problems, f)
	})
	if len(problems) > 0 {
		t.Fatalf("FromEnv(%v): %v", env, problems)
	}
	return s
}

// TestCheckConnects: TLS, mutual TLS, PLAIN and SCRAM over TLS, each against a broker that
// refuses less, pass the check.
func TestCheckConnects(t *testing.T) {
	for _, tc := range []struct {
		name string
		mtls bool
		mech string
	}{{"TLS", false, ""}, {"mutual TLS", true, ""}, {"PLAIN", false, "PLAIN"}, {"SCRAM-SHA-256", false, "SCRAM-SHA-256"}, {"SCRAM-SHA-512", true, "SCRAM-SHA-512"}} {
		t.Run(tc.name, func(t *testing.T) {
			addr, ca := secured(t, tc.mtls, tc.mech)
			env := map[string]string{"FLOW_KAFKA_TLS": "true", "FLOW_KAFKA_TLS_CA_FILE": ca.File}
			if tc.mtls {
				p := ca.Issue(t, "client", time.Time{}, time.Time{})
				env["FLOW_KAFKA_TLS_CERT_FILE"], env["FLOW_KAFKA_TLS_KEY_FILE"] = p.CertFile, p.KeyFile
			}
			if tc.mech != "" {
				pw := filepath.Join(t.TempDir(), "password")
				if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				env["FLOW_KAFKA_SASL_MECHANISM"], env["FLOW_KAFKA_SASL_USERNAME"], env["FLOW_KAFKA_SASL_PASSWORD_FILE"] = tc.mech, "alice", pw
			}
			if err := kafkaconn.Check(context.Background(), []string{addr}, settings(t, env), kafkaconn.CheckTimeout); err != nil {
				t.Errorf("Check = %v; want nil", err)
			}
		})
	}
}

// TestCheckNamesTheSetting: each refusal is a *RefusedError naming the setting to fix, within
// seconds.
func TestCheckNamesTheSetting(t *testing.T) {
	sasl := func(mech, user, pass string) map[string]string {
		return map[string]string{"FLOW_KAFKA_SASL_MECHANISM": mech, "FLOW_KAFKA_SASL_USERNAME": user, "FLOW_KAFKA_SASL_PASSWORD": pass}
	}
	other := testkit.NewCA(t, "other")
	for _, tc := range []struct {
		name       string
		mtls       bool
		brokerMech string
		env        map[string]string
		trust      bool // FLOW_KAFKA_TLS_CA_FILE is the broker's CA
		expired    bool // the broker's certificate has expired
		want       string
		mentions   string // what the message must name besides the setting
	}{
		{name: "wrong password", brokerMech: "SCRAM-SHA-512", env: sasl("SCRAM-SHA-512", "alice", "wrong"), trust: true, want: "FLOW_KAFKA_SASL_PASSWORD"},
		{name: "unknown user", brokerMech: "PLAIN", env: sasl("PLAIN", "bob", "s3cret-pw"), trust: true, want: "FLOW_KAFKA_SASL_PASSWORD"},
		// kfake closes the connection whatever is wrong in the exchange, so the error names
		// both; Kafka answers UnsupportedSaslMechanism, which names the mechanism alone.
		{name: "mechanism not offered", brokerMech: "SCRAM-SHA-256", env: sasl("PLAIN", "alice", "s3cret-pw"), trust: true, want: "FLOW_KAFKA_SASL_PASSWORD", mentions: "FLOW_KAFKA_SASL_MECHANISM"},
		{name: "no SASL to a SASL broker", brokerMech: "PLAIN", env: map[string]string{}, trust: true, want: "FLOW_KAFKA_SASL_MECHANISM"},
		{name: "expired broker certificate", expired: true, env: map[string]string{}, trust: true, want: "FLOW_KAFKA_TLS_CA_FILE", mentions: "expired"},
		{name: "unknown CA", env: map[string]string{"FLOW_KAFKA_TLS_CA_FILE": other.File}, want: "FLOW_KAFKA_TLS_CA_FILE"},
		{name: "system roots", env: map[string]string{}, want: "FLOW_KAFKA_TLS_CA_FILE"},
		{name: "no client certificate", mtls: true, env: map[string]string{}, trust: true, want: "FLOW_KAFKA_TLS_CERT_FILE"},
		{name: "plaintext to TLS", env: map[string]string{"FLOW_KAFKA_TLS": "false"}, want: "FLOW_KAFKA_TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var notAfter time.Time
			if tc.expired {
				notAfter = time.Now().Add(-time.Minute)
			}
			addr, ca := securedUntil(t, tc.mtls, tc.brokerMech, notAfter)
			env := map[string]string{"FLOW_KAFKA_TLS": "true"}
			if tc.trust {
				env["FLOW_KAFKA_TLS_CA_FILE"] = ca.File
			}
			for k, v := range tc.env {
				env[k] = v
			}
			if env["FLOW_KAFKA_TLS"] == "false" {
				delete(env, "FLOW_KAFKA_TLS")
			}
			began := time.Now()
			err := kafkaconn.Check(context.Background(), []string{addr}, settings(t, env), kafkaconn.CheckTimeout)
			var r *kafkaconn.RefusedError
			if !errors.As(err, &r) || !errors.Is(err, kafkaconn.ErrRefused) || r.Setting != tc.want {
				t.Fatalf("Check = %v; want a refusal naming %s", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mentions) || !strings.HasPrefix(err.Error(), tc.want+": ") {
				t.Errorf("Check = %v; want it to start with %s and mention %q", err, tc.want, tc.mentions)
			}
			if took := time.Since(began); took > 5*time.Second {
				t.Errorf("the refusal took %s; want it within seconds", took)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}

// TestCheckUnreachable: no broker listening is ErrUnreachable, no refusal: the caller may wait
// for a broker that is starting.
func TestCheckUnreachable(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	err := kafkaconn.Check(context.Background(), []string{addr}, kafkaconn.Settings{}, time.Second)
	if !errors.Is(err, kafkaconn.ErrUnreachable) || errors.Is(err, kafkaconn.ErrRefused) {
		t.Errorf("Check = %v; want ErrUnreachable", err)
	}
}

// TestCheckOnSecuredKafka: where a secured Kafka is named, its answers map as kfake's closed
// connections do, and more precisely: a wrong password is SaslAuthenticationFailed, and a
// mechanism its listener does not enable (its inter-broker listener, port+2, takes only
// SCRAM-SHA-512) is UnsupportedSaslMechanism, naming FLOW_KAFKA_SASL_MECHANISM alone. On kfake
// only the wrong password is asked.
func TestCheckOnSecuredKafka(t *testing.T) {
	addr, ca := secured(t, false, "SCRAM-SHA-512")
	caFile, wrongMech := ca.File, ""
	if testkit.SecuredKafka() {
		addr = strings.Split(os.Getenv(testkit.EnvSecuredBrokers), ",")[0]
		caFile = filepath.Join(os.Getenv(testkit.EnvSecuredHome), "tls", "ca.crt")
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		wrongMech = net.JoinHostPort(host, strconv.Itoa(p+2))
	}
	env := func(mech, pass string) map[string]string {
		return map[string]string{"FLOW_KAFKA_TLS": "true", "FLOW_KAFKA_TLS_CA_FILE": caFile, "FLOW_KAFKA_SASL_MECHANISM": mech,
			"FLOW_KAFKA_SASL_USERNAME": testkit.SecuredUser, "FLOW_KAFKA_SASL_PASSWORD": pass}
	}
	err := kafkaconn.Check(context.Background(), []string{addr}, settings(t, env("SCRAM-SHA-512", "wrong")), kafkaconn.CheckTimeout)
	var r *kafkaconn.RefusedError
	if !errors.As(err, &r) || r.Setting != "FLOW_KAFKA_SASL_PASSWORD" {
		t.Errorf("Check with a wrong password = %v; want a refusal naming FLOW_KAFKA_SASL_PASSWORD", err)
	}
	if wrongMech == "" {
		return
	}
	err = kafkaconn.Check(context.Background(), []string{wrongMech}, settings(t, env("PLAIN", testkit.SecuredPassword)), kafkaconn.CheckTimeout)
	if !errors.As(err, &r) || r.Setting != "FLOW_KAFKA_SASL_MECHANISM" {
		t.Errorf("Check with a mechanism the listener does not enable = %v; want a refusal naming FLOW_KAFKA_SASL_MECHANISM", err)
	}
}
