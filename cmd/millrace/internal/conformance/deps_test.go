package conformance_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps lists what pkg links, by `go list -deps` (the go command is always there when tests run).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH (%v): this test asks it what the kit links", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	pkgs := strings.Fields(string(out))
	if !slices.Contains(pkgs, pkg) {
		t.Fatalf("go list -deps %s does not list %s itself: %q", pkg, pkg, pkgs)
	}
	return pkgs
}

// TestLinksNoServer: the conformance kit, the action config it reads, the loader behind
// `millrace describe`, `test` and `init` (package actiondir) and the protocol's messages they
// share link none of the bridge's server, the sidecar, gRPC, OpenTelemetry or Prometheus: a tool
// that reads an action line stays close to the engine it runs (the service stubs are
// flowv1grpc's, apart from the messages, for this).
func TestLinksNoServer(t *testing.T) {
	const mod = "github.com/ankka-flow/millrace/"
	for _, pkg := range []string{mod + "cmd/millrace/internal/conformance", mod + "bridge/actionconf", mod + "cmd/millrace/internal/actiondir", mod + "protocol/ankka/flow/v1"} {
		for _, p := range deps(t, pkg) {
			switch {
			case p == mod+"bridge", p == mod+"sidecar", strings.HasPrefix(p, mod+"sidecar/"):
				t.Errorf("%s links %s, the server of a container", pkg, p)
			case strings.HasPrefix(p, "go.opentelemetry.io/"), strings.HasPrefix(p, "github.com/prometheus/"):
				t.Errorf("%s links %s: spans and metrics are the bridge's, not a tool's", pkg, p)
			case p == "google.golang.org/grpc", strings.HasPrefix(p, "google.golang.org/grpc/"):
				t.Errorf("%s links %s: gRPC is the bridge's and the sidecar's, not a tool's", pkg, p)
			}
		}
	}
}
