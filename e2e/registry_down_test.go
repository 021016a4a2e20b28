package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestRegistryDown: while the schema registry does not answer, the bridge retries it, then
// fails the batch naming the fix; nothing is committed, dead-lettered or written. Once it
// answers again the redelivered records all go through, each once.
func TestRegistryDown(t *testing.T) {
	reg := srfake.New()
	t.Cleanup(reg.Close)
	var down atomic.Bool
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	b := newBroker(t)
	pl := newPipeline(t, b, priceBand(reg.URL()), 1)
	dir := filepath.Join(bin.root, "actions/price-band")
	for subject, file := range map[string]string{pl.inTopic + "-value": "listings.avsc", pl.outTopics["bands"] + "-value": "bands.proto"} {
		text, err := os.ReadFile(filepath.Join(dir, "schemas", file))
		if err != nil {
			t.Fatal(err)
		}
		typ := sr.TypeAvro
		if strings.HasSuffix(file, ".proto") {
			typ = sr.TypeProtobuf
		}
		if _, _, err := reg.RegisterSchema(subject, sr.Schema{Schema: string(text), Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	client, err := schema.New(schema.Settings{URLs: []string{reg.URL()}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	recs := make([]*kgo.Record, n)
	for i := range recs {
		id := fmt.Sprintf("id-%07d", i)
		v, err := client.Encode(context.Background(), pl.inTopic, false, schema.Codec{Format: schema.Avro}, fmt.Appendf(nil, `{"id":%q,"price":%d,"rooms":2,"city":null}`, id, 100_000+i))
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = &kgo.Record{Key: []byte(id), Value: v}
	}

	down.Store(true)
	r := pl.start(0)
	pl.produce(recs...)
	// The bridge retries for 30 s (DefaultRegistryRetryFor), then fails the batch.
	if !testkit.Eventually(90*time.Second, func() bool { return r.sidecar.LogHas("stream failed") }) {
		t.Fatalf("no failed stream within 90 s of the registry going down\n%s", pl.logTails(20))
	}
	if !r.bridge.LogHas("the schema registry did not answer; retrying") {
		t.Errorf("the bridge's log lacks its retries of the registry\n%s", r.bridge.Tail(20))
	}
	failure := firstLine(r.sidecar.LogLines("stream failed", 1))
	for _, want := range []string{"cannot be decoded", "check that the schema registry MILLRACE_SCHEMA_REGISTRY_URL names is up", "nothing of it is committed"} {
		if !strings.Contains(failure, want) {
			t.Errorf("the sidecar's failure %s; want it with %q", cut(failure, 600), want)
		}
	}
	if c, commits := pl.committedCount(); c != 0 {
		t.Errorf("committed %d records (%v) while the registry was down; want none", c, commits)
	}
	for _, out := range pl.outTopics {
		if got := b.ReadAll(t, out); len(got) != 0 {
			t.Errorf("%d records on %s while the registry was down; want none", len(got), out)
		}
	}

	down.Store(false)
	pl.waitDone(90 * time.Second)
	tl := pl.tally()
	pl.report("registry down, then back", tl, "failure: "+cut(logMessage(failure), 300))
	tl.check(t)
	if tl.out != n || tl.dead != 0 || tl.dup != 0 {
		t.Errorf("tally = %s; want %d bands, no dead letter, no duplicate", tl, n)
	}
}
