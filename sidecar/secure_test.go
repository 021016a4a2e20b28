package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar"
)

// securedBroker is the tests' secured kfake (testkit.NewSecuredBroker) with newBroker's
// admin options.
func securedBroker(t *testing.T, sec testkit.Security) (*testkit.Broker, env) {
	t.Helper()
	sec.Client = []kgo.Opt{kgo.DefaultProduceTopic(""), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}
	b, vars := testkit.NewSecuredBroker(t, sec)
	return b, env(vars)
}

// TestSecuredEcho runs the echo against brokers that refuse anything less than TLS, mutual
// TLS, SASL PLAIN or SCRAM over TLS, in both delivery modes.
func TestSecuredEcho(t *testing.T) {
	type row struct {
		name string
		sec  testkit.Security
	}
	rows := []row{
		{"TLS", testkit.Security{}},
		{"mutual TLS", testkit.Security{MutualTLS: true}},
		{"PLAIN over TLS", testkit.Security{Mechanism: "PLAIN"}},
		{"SCRAM-SHA-256 over TLS", testkit.Security{Mechanism: "SCRAM-SHA-256"}},
		{"SCRAM-SHA-512 over TLS", testkit.Security{Mechanism: "SCRAM-SHA-512"}},
		{"SCRAM-SHA-512 over mutual TLS", testkit.Security{MutualTLS: true, Mechanism: "SCRAM-SHA-512"}},
	}
	if testkit.SecuredKafka() {
		// kfake has no OAUTHBEARER; Kafka's built-in unsecured validator takes the token.
		rows = append(rows, row{"OAUTHBEARER over TLS", testkit.Security{Mechanism: "OAUTHBEARER"}})
	}
	for _, tc := range rows {
		for _, delivery := range []string{"at-least-once", "exactly-once"} {
			t.Run(tc.name+"/"+delivery, func(t *testing.T) {
				b, vars := securedBroker(t, tc.sec)
				in, out := b.Topic(t, "in", 2), b.Topic(t, "out", 2)
				e := baseEnv(t, b, newProcess(t, echo), in, out)
				for k, v := range vars {
					e[k] = v
				}
				e["FLOW_DELIVERY"] = delivery
				b.Produce(t, records(in, 2, 40)...)
				secureEcho(t, b, e, 40)
			})
		}
	}
}

// secureEcho runs a sidecar with e over the n records of records(in, 2, n) already in its
// inlet, and checks every output is there once and every offset committed.
func secureEcho(t *testing.T, b *testkit.Broker, e env, n int) {
	t.Helper()
	in, out := strings.TrimPrefix(e["FLOW_INLETS"], "in="), strings.TrimPrefix(e["FLOW_OUTLETS"], "out=")
	r := start(t, e.config(t))
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(2, n)) })
	got := b.ReadN(t, out, n, waitTimeout)
	seen := map[string]int{}
	for _, rec := range got {
		seen[string(rec.Value)]++
	}
	for _, want := range records(in, 2, n) {
		if seen[string(want.Value)+"!"] != 1 {
			t.Errorf("output of %q seen %d times; want once", want.Value, seen[string(want.Value)+"!"])
		}
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil", err)
	}
}

// TestSecuredRefusalStopsAtOnce: a wrong password, a CA the broker's certificate is not
// signed by, and a missing or foreign client certificate for a broker that demands mutual TLS
// each stop the sidecar within seconds with an error naming the setting.
func TestSecuredRefusalStopsAtOnce(t *testing.T) {
	scram, mtls := testkit.Security{Mechanism: "SCRAM-SHA-512"}, testkit.Security{MutualTLS: true}
	for _, tc := range []struct {
		name    string
		sec     testkit.Security
		change  func(t *testing.T, e env)
		setting string
	}{
		{"wrong password", scram, func(t *testing.T, e env) {
			delete(e, "FLOW_KAFKA_SASL_PASSWORD_FILE")
			e["FLOW_KAFKA_SASL_PASSWORD"] = "not-the-password"
		}, "FLOW_KAFKA_SASL_PASSWORD"},
		{"unknown CA", scram, func(t *testing.T, e env) { e["FLOW_KAFKA_TLS_CA_FILE"] = testkit.NewCA(t, "other").File }, "FLOW_KAFKA_TLS_CA_FILE"},
		{"no client certificate", mtls, func(t *testing.T, e env) {
			delete(e, "FLOW_KAFKA_TLS_CERT_FILE")
			delete(e, "FLOW_KAFKA_TLS_KEY_FILE")
		}, "FLOW_KAFKA_TLS_CERT_FILE"},
		{"client certificate of another CA", mtls, func(t *testing.T, e env) {
			p := testkit.NewCA(t, "other").Issue(t, "client", time.Time{}, time.Time{})
			e["FLOW_KAFKA_TLS_CERT_FILE"], e["FLOW_KAFKA_TLS_KEY_FILE"] = p.CertFile, p.KeyFile
		}, "FLOW_KAFKA_TLS_CERT_FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, vars := securedBroker(t, tc.sec)
			in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
			f := newProcess(t, echo)
			e := baseEnv(t, b, f, in, out)
			for k, v := range vars {
				e[k] = v
			}
			tc.change(t, e)
			r := start(t, e.config(t))
			var err error
			select {
			case err = <-r.done:
				close(r.done)
			case <-time.After(5 * time.Second):
				t.Fatalf("the sidecar still runs after 5s; want it stopped with an error naming %s\n%s", tc.setting, r.logs.String())
			}
			var refused *kafkaconn.RefusedError
			if !errors.As(err, &refused) || refused.Setting != tc.setting {
				t.Fatalf("Run() = %v; want a refusal naming %s", err, tc.setting)
			}
			if f.Conversations() != 0 {
				t.Errorf("%d conversations; want none before Kafka accepts the settings", f.Conversations())
			}
		})
	}
}

// startDebug is start with debug logging: everything the sidecar and franz-go may say.
func startDebug(t *testing.T, cfg *sidecar.Config) *running {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	records := testkit.NewLogs(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sc, err := sidecar.New(cfg, slog.New(records))
	if err != nil {
		t.Fatalf("sidecar.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{sc: sc, cancel: cancel, done: make(chan error, 1), logs: logs, records: records}
	go func() { r.done <- sc.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// TestSecretsStaySecret runs a sidecar at debug level with a known password, once accepted
// (the echo, with metrics served) and once refused, and finds the password in no log line,
// error, metric or configuration error.
func TestSecretsStaySecret(t *testing.T) {
	b, vars := securedBroker(t, testkit.Security{Mechanism: "SCRAM-SHA-512"})
	in, out := b.Topic(t, "in", 1), b.Topic(t, "out", 1)
	f := newProcess(t, echo)
	e := baseEnv(t, b, f, in, out)
	for k, v := range vars {
		e[k] = v
	}
	delete(e, "FLOW_KAFKA_SASL_PASSWORD_FILE")
	e["FLOW_KAFKA_SASL_PASSWORD"] = testkit.SecuredPassword
	e["FLOW_METRICS_ADDR"] = fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	var shown strings.Builder
	check := func(what, text string) {
		t.Helper()
		shown.WriteString(text)
		if strings.Contains(text, testkit.SecuredPassword) {
			t.Errorf("%s shows the password:\n%s", what, text)
		}
	}

	b.Produce(t, records(in, 1, 10)...)
	cfg := e.config(t)
	check("the configuration printed", fmt.Sprintf("%v\n%+v\n%#v", *cfg, *cfg, cfg.SASL))
	r := startDebug(t, cfg)
	waitFor(t, "every record committed", func() bool { return allCommitted(t, b, e["FLOW_CONSUMER_GROUP"], in, ends(1, 10)) })
	resp, err := http.Get("http://" + e["FLOW_METRICS_ADDR"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	check("/metrics", string(body))
	if err := r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil", err)
	}
	check("the debug log", r.logs.String())

	// Refused: SCRAM's proof is derived from the password, and PLAIN sends it, but neither
	// the error nor the log may show it.
	for _, mech := range []string{"SCRAM-SHA-512", "PLAIN"} {
		e["FLOW_KAFKA_SASL_MECHANISM"], e["FLOW_KAFKA_SASL_USERNAME"] = mech, "nobody"
		refused := startDebug(t, e.config(t))
		err := <-refused.done
		close(refused.done)
		if !errors.Is(err, kafkaconn.ErrRefused) {
			t.Errorf("Run() as nobody with %s = %v; want a refusal", mech, err)
		}
		check("the refusal", fmt.Sprint(err))
		check("the refused run's log", refused.logs.String())
	}

	// A configuration error lists every problem, the SASL ones included, without the password.
	e["FLOW_KAFKA_SASL_USERNAME"], e["FLOW_KAFKA_SASL_MECHANISM"] = "", "NOPE"
	_, err = sidecar.ConfigFromEnv(e.get, nil)
	if err == nil {
		t.Fatal("ConfigFromEnv with a bad mechanism = nil; want problems")
	}
	check("the configuration error", err.Error())
	if !strings.Contains(shown.String(), "FLOW_KAFKA_SASL_PASSWORD") {
		t.Errorf("no output names FLOW_KAFKA_SASL_PASSWORD; the grep looked at the wrong outputs")
	}
	if !strings.Contains(shown.String(), "sasl") && !strings.Contains(shown.String(), "SASL") {
		t.Errorf("the debug log says nothing of SASL; the grep looked at too little")
	}
}
