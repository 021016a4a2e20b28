package sidecar_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestReauthentication runs a sidecar across the broker's demand to re-authenticate
// (KIP-368): on kfake, SCRAM sessions that last 300 ms; on the secured Kafka, an OAUTHBEARER
// token that expires mid-run and is replaced in its file, as a projected service-account
// token rotates. Records produced after the re-authentication are delivered and committed
// once: the sidecar kept running with the new credentials.
func TestReauthentication(t *testing.T) {
	t.Run("kfake SCRAM sessions of 300ms", func(t *testing.T) {
		var auths authCount
		sec := testkit.Security{Mechanism: "SCRAM-SHA-512",
			Kfake: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"connections.max.reauth.ms": "300"})},
			Client: []kgo.Opt{kgo.DefaultProduceTopic(""), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
				kgo.WithHooks(&auths)}}
		b, vars := testkit.NewSecuredBroker(t, sec)
		reauthEcho(t, b, env(vars), func() {
			// The broker demands it: the test's own client re-authenticates on a connection it
			// keeps (more handshakes than connections).
			waitFor(t, "the admin client re-authenticated", func() bool {
				if err := b.Admin.Ping(context.Background()); err != nil {
					t.Logf("ping: %v", err)
				}
				return auths.reauthenticated()
			})
		})
	})
	if !testkit.SecuredKafka() {
		return // kfake has no OAUTHBEARER
	}
	t.Run("Kafka OAUTHBEARER token rotated", func(t *testing.T) {
		b, e := securedBroker(t, testkit.Security{Mechanism: "OAUTHBEARER"})
		file := e["FLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE"]
		// Long enough for the sidecar to start and deliver the first records, short enough
		// to expire within the test.
		testkit.WriteUnsecuredToken(t, file, testkit.SecuredUser, time.Now().Add(10*time.Second))
		old := oldToken(t, b, e)
		reauthEcho(t, b, e, func() {
			testkit.WriteUnsecuredToken(t, file, testkit.SecuredUser, time.Now().Add(time.Hour))
			// The broker's clock decides when the old token's session ends: from then on a
			// client that kept the old token is refused (its connection closed, the token
			// refused on the next), and the sidecar, had it kept it, would be too.
			waitFor(t, "the broker refusing the old token", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				return errors.Is(old.Ping(ctx), kerr.SaslAuthenticationFailed)
			})
		})
	})
}

// reauthEcho runs the echo over n records, calls between (which waits for the broker to have
// demanded re-authentication), and runs it over n more with the same sidecar.
func reauthEcho(t *testing.T, b *testkit.Broker, vars env, between func()) {
	t.Helper()
	const n = 20
	in, out := b.Topic(t, "in", 2), b.Topic(t, "out", 2)
	e := baseEnv(t, b, newProcess(t, echo), in, out)
	for k, v := range vars {
		e[k] = v
	}
	all := records(in, 2, 2*n)
	b.Produce(t, all[:n]...)
	r := start(t, e.config(t))
	group := e["FLOW_CONSUMER_GROUP"]
	waitFor(t, "the first records committed", func() bool { return allCommitted(t, b, group, in, ends(2, n)) })
	between()
	b.Produce(t, all[n:]...)
	waitFor(t, "the records after re-authentication committed", func() bool { return allCommitted(t, b, group, in, ends(2, 2*n)) })
	seen := map[string]int{}
	for _, rec := range b.ReadN(t, out, 2*n, waitTimeout) {
		seen[string(rec.Value)]++
	}
	for _, want := range all {
		if seen[string(want.Value)+"!"] != 1 {
			t.Errorf("output of %q seen %d times; want once", want.Value, seen[string(want.Value)+"!"])
		}
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil; log:\n%s", err, r.logs.String())
	}
}

// oldToken is a client that authenticates with the token now in file and keeps it: once the
// broker ends that token's session, its requests are refused. It answers at once, so the
// token is good until then.
func oldToken(t *testing.T, b *testkit.Broker, vars env) *kgo.Client {
	t.Helper()
	tok, err := os.ReadFile(vars["FLOW_KAFKA_SASL_OAUTHBEARER_TOKEN_FILE"])
	if err != nil {
		t.Fatal(err)
	}
	tlsOnly := env{"FLOW_KAFKA_TLS": "true", "FLOW_KAFKA_TLS_CA_FILE": vars["FLOW_KAFKA_TLS_CA_FILE"]}
	conn := kafkaconn.FromEnv(tlsOnly.get, os.ReadFile, func(f string, a ...any) { t.Fatalf(f, a...) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.DialTLSConfig(conn.TLS),
		kgo.SASL(oauth.Auth{Token: string(tok)}.AsMechanism()), kgo.RetryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cl.Ping(context.Background()); err != nil {
		t.Fatalf("the token before it expires: %v", err)
	}
	return cl
}

// authCount counts a client's connections and SASL handshakes: more handshakes than
// connections is a re-authentication on a kept connection.
type authCount struct {
	mu                   sync.Mutex
	connects, handshakes int
}

func (a *authCount) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		a.mu.Lock()
		a.connects++
		a.mu.Unlock()
	}
}

func (a *authCount) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key == 17 { // SaslHandshake
		a.mu.Lock()
		a.handshakes++
		a.mu.Unlock()
	}
}

func (a *authCount) reauthenticated() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.handshakes > a.connects
}
