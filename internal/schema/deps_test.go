package schema_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStdioLinksNoCodec: the action protocol, its engine and the Go SDK link none of the
// registry client and codec libraries; only the bridge and the local tools pay for them.
func TestStdioLinksNoCodec(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH (%v): this test asks it what stdio links", err)
	}
	const mod = "github.com/ankka-flow/millrace/"
	out, err := exec.Command(goCmd, "list", "-deps", mod+"stdio/...", mod+"stdio/action").Output()
	if err != nil {
		t.Fatalf("go list -deps %sstdio/...: %v", mod, err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 {
		t.Fatalf("go list -deps listed %d packages, too few to be stdio's: %q", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		for _, banned := range []string{mod + "internal/schema", "github.com/twmb/franz-go/pkg/sr", "github.com/twmb/avro",
			"github.com/bufbuild/protocompile", "github.com/santhosh-tekuri/jsonschema"} {
			if p == banned || strings.HasPrefix(p, banned+"/") {
				t.Errorf("stdio links %s: the schema registry codecs are the bridge's, not the action protocol's", p)
			}
		}
	}
}
