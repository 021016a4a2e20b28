package schema_test

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// testRegistryEnv names a real Confluent-compatible registry (scripts/registry starts
// Apicurio Registry's) for the tests that mean the same against one; without it they run
// against srfake.
const testRegistryEnv = "MILLRACE_SCHEMA_REGISTRY_TEST_URL"

// target is the registry a test registers its schemas in, with a client of it. On a real,
// shared registry every topic and subject the test names goes under a prefix of this run's, so
// runs never meet.
type target struct {
	url, prefix string
	reg         *schema.Registry
	cl          *sr.Client
}

func newTarget(t testing.TB) *target {
	t.Helper()
	tg := &target{url: os.Getenv(testRegistryEnv)}
	if tg.url == "" {
		f := srfake.New()
		t.Cleanup(f.Close)
		tg.url = f.URL()
	} else {
		tg.prefix = "millrace-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	}
	// A real registry keeps its connections open after a test, unlike srfake, which closes them
	// when it stops: both clients end theirs, so goleak sees no idle connection's goroutines.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	cl, err := sr.NewClient(sr.URLs(tg.url), sr.HTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	tg.cl = cl
	reg, err := schema.New(schema.Settings{URLs: []string{tg.url}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	tg.reg = reg
	return tg
}

// name is a topic's or subject's name for this run.
func (tg *target) name(s string) string { return tg.prefix + s }

// register registers s under subject (named for this run, as are its references' subjects)
// and returns its id.
func (tg *target) register(t testing.TB, subject string, s sr.Schema) int {
	t.Helper()
	refs := make([]sr.SchemaReference, len(s.References))
	for i, r := range s.References {
		r.Subject = tg.name(r.Subject)
		refs[i] = r
	}
	s.References = refs
	ss, err := tg.cl.CreateSchema(context.Background(), tg.name(subject), s)
	if err != nil {
		t.Fatalf("register %s at %s: %v", tg.name(subject), tg.url, err)
	}
	return ss.ID
}

// registrar registers a schema under a subject and returns its id: a *fake or a *target.
type registrar interface {
	register(t testing.TB, subject string, s sr.Schema) int
}
