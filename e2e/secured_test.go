package e2e_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestSecuredEcho runs the Go echo through the millrace processes on a broker that demands
// SCRAM-SHA-512 over TLS (kfake with a CA the test makes, or the secured Kafka when
// MILLRACE_KAFKA_SECURED_BROKERS names it), the password from a file as a Secret mounts it, in
// both delivery modes: every record comes out once, and the sidecar's log never shows the
// password.
func TestSecuredEcho(t *testing.T) {
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		t.Run(delivery, func(t *testing.T) {
			tb, vars := testkit.NewSecuredBroker(t, testkit.Security{Mechanism: "SCRAM-SHA-512",
				Client: []kgo.Opt{kgo.ProducerLinger(0), kgo.MaxBufferedRecords(100_000)}})
			env := []string{deliveryEnv(delivery)}
			for k, v := range vars {
				env = append(env, k+"="+v)
			}
			pl := newPipeline(t, &broker{tb}, goEcho(), 2, env...)
			r := pl.start(0)
			pl.produce(pl.records(0, ciN(500))...)
			pl.waitDone(60 * time.Second)
			tl := pl.tally()
			pl.report("secured echo, "+delivery, tl, "")
			tl.check(t)
			if tl.out != tl.in || tl.dup != 0 {
				t.Errorf("tally = %s; want every record out once", tl)
			}
			if r.sidecar.LogHas(testkit.SecuredPassword) {
				t.Errorf("the sidecar's log shows the password:\n%s", r.sidecar.Tail(40))
			}
		})
	}
}
