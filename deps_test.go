// Package millrace_test holds the one test of the module's layers: which package may import
// which, stated bottom up for every package of the module (as go/build's deps_test.go states
// the standard library's), and what a few packages must never link.
package millrace_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/ankka-flow/millrace/"

// layers states the module's packages bottom up (paths without the module's prefix). A rule
// "a, b < c, d" lets c and d import a, b and whatever a and b may import; NONE is no package
// of ours. Every package of the module is on the right of exactly one rule, after the rules of
// everything it may import. Only the imports of a package's own files are held here (its tests
// may import more: internal/testkit, a fake of the other side); the two containers' tests are
// held apart below (TestPodHalvesApart).
const layers = `
	# The contract's generated code, the wire's own helper and the small parts below both
	# containers: nothing of ours.
	NONE
	< protocol/ankka/flow/v1, protocol/millrace/state/v1, protocol/internal/splitgrpc,
	  stdio/internal/errtext,
	  internal/httpserve, internal/kafkalog, internal/lifetime, internal/tlsconf,
	  sidecar/internal/kube, sidecar/internal/state,
	  sdk;

	# The contract: the service stubs apart from the messages (a user of the messages links
	# no gRPC); package protocol only above the generated code.
	protocol/ankka/flow/v1 < protocol/ankka/flow/v1/flowv1grpc, protocol;
	# The gRPC codec decodes the State service's per-batch messages on its hot path too.
	protocol/ankka/flow/v1, protocol/millrace/state/v1 < internal/codec;

	# The action protocol's wire imports nothing of ours but its helper; the Go SDK links
	# only the wire; the engine runs actions over it.
	stdio/internal/errtext < stdio;
	stdio < stdio/action, stdio/engine;

	# Leaves both containers and the command share, importing no application.
	protocol < internal/settings;
	internal/settings, internal/tlsconf < internal/kafkaconn, internal/schema;
	protocol/ankka/flow/v1/flowv1grpc < internal/testkit;

	# The action config line: the protocol and the engine's config, no server.
	protocol, stdio/engine < bridge/actionconf;

	# The two containers of a pod: they meet only over gRPC, never importing each other.
	bridge/actionconf, protocol/ankka/flow/v1/flowv1grpc, protocol/millrace/state/v1,
	internal/codec, internal/httpserve, internal/lifetime, internal/schema, internal/settings
	< bridge;
	protocol/ankka/flow/v1/flowv1grpc, protocol/millrace/state/v1,
	internal/codec, internal/httpserve, internal/kafkaconn, internal/kafkalog,
	internal/lifetime, internal/settings, sidecar/internal/kube, sidecar/internal/state
	< sidecar;

	# The command's applications, under cmd/millrace/internal: Go keeps them to the command.
	bridge/actionconf < cmd/millrace/internal/conformance;
	cmd/millrace/internal/conformance, sdk < cmd/millrace/internal/actiondir;
	internal/kafkaconn < cmd/millrace/internal/replay;
	bridge, sidecar, cmd/millrace/internal/actiondir, internal/httpserve, internal/kafkalog,
	internal/schema
	< cmd/millrace/internal/local;

	# The page of millrace run --ui: fed by the local runner, no more.
	cmd/millrace/internal/local < cmd/millrace/internal/ui;

	# The one binary: it only wires.
	cmd/millrace/internal/local, cmd/millrace/internal/replay, cmd/millrace/internal/ui
	< cmd/millrace;

	# Example actions and benchmark actions: programs on the Go SDK alone.
	stdio/action
	< actions/convert-currency, actions/go-echo, actions/running-total-go, bench/statecount,
	bench/waitgo;
	NONE < actions/charge-payment, bench, bench/gapecho, bench/table, e2e;
`

// neverLinks: what a package must not link at all, ours or not: an import path, or with "/..."
// the path and everything below it, as the go command's patterns.
var neverLinks = []struct {
	pkgs, banned []string
	why          string
}{
	{
		pkgs:   []string{"cmd/millrace/internal/conformance", "cmd/millrace/internal/actiondir", "bridge/actionconf", "protocol/ankka/flow/v1"},
		banned: []string{mod + "bridge", mod + "sidecar/...", "google.golang.org/grpc/...", "go.opentelemetry.io/...", "github.com/prometheus/..."},
		why:    "a tool that reads an action line links no server, gRPC, spans or metrics: those are the containers'",
	},
	{
		pkgs:   []string{"stdio", "stdio/action", "stdio/engine"},
		banned: []string{mod + "internal/schema", "github.com/twmb/franz-go/pkg/sr/...", "github.com/twmb/avro/...", "github.com/bufbuild/protocompile/...", "github.com/santhosh-tekuri/jsonschema/...", "google.golang.org/..."},
		why:    "the action protocol links no registry codec and no protobuf or gRPC: those are the bridge's",
	},
	{
		pkgs:   []string{"bridge", "sidecar", "stdio/engine"},
		banned: []string{mod + "cmd/millrace/internal/ui/...", mod + "cmd/millrace/internal/local/...", "github.com/chromedp/..."},
		why:    "the page of millrace run --ui is the command's: millrace sidecar and millrace bridge link nothing of it",
	},
}

// pkg is what `go list -json` says of a package.
type pkg struct {
	ImportPath                string
	Imports                   []string
	TestImports, XTestImports []string
	Deps                      []string
}

// list runs `go list -json` on the module's packages (the go command is always there when
// tests run).
func list(t *testing.T) map[string]pkg {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH (%v): this test asks it what each package imports", err)
	}
	out, err := exec.Command(goCmd, "list", "-json", "./...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -json ./...: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -json ./...: %v", err)
	}
	pkgs := map[string]pkg{}
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list -json ./...: %v", err)
		}
		if p.ImportPath+"/" == mod {
			continue // this test's own package
		}
		pkgs[strings.TrimPrefix(p.ImportPath, mod)] = p
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list -json ./... listed %d packages, too few to be the module's", len(pkgs))
	}
	return pkgs
}

// ours is an import path of the module, without the module's prefix, or "".
func ours(path string) string {
	if rest, ok := strings.CutPrefix(path, mod); ok {
		return rest
	}
	return ""
}

// parseLayers returns, for each package the rules name, every package of ours it may import.
func parseLayers(t *testing.T, rules string) map[string]map[string]bool {
	t.Helper()
	var lines []string
	for _, line := range strings.Split(rules, "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		lines = append(lines, line)
	}
	allowed := map[string]map[string]bool{"NONE": {}}
	for _, rule := range strings.Split(strings.Join(lines, " "), ";") {
		if strings.TrimSpace(rule) == "" {
			continue
		}
		below, above, ok := strings.Cut(rule, "<")
		if !ok || strings.Contains(above, "<") {
			t.Fatalf("layers: rule %q is not \"a, b < c, d\"", strings.Join(strings.Fields(rule), " "))
		}
		may := map[string]bool{}
		for _, b := range names(below) {
			if _, ok := allowed[b]; !ok {
				t.Fatalf("layers: %s is used before a rule places it", b)
			}
			if b != "NONE" {
				may[b] = true
			}
			for a := range allowed[b] {
				may[a] = true
			}
		}
		for _, a := range names(above) {
			if _, ok := allowed[a]; ok {
				t.Fatalf("layers: %s is placed twice", a)
			}
			allowed[a] = may
		}
	}
	delete(allowed, "NONE")
	return allowed
}

func names(list string) []string {
	var out []string
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// TestLayers: every package of the module is placed in layers, and imports only what its rule
// allows. A new package needs its rule; an import that runs up (a leaf importing an
// application, bridge and sidecar importing each other, stdio importing anything of ours)
// fails here, naming the import and the rule.
func TestLayers(t *testing.T) {
	for _, v := range violations(parseLayers(t, layers), list(t)) {
		t.Error(v)
	}
}

// violations lists every package the rules do not place, every import they do not allow, and
// every rule naming no package.
func violations(allowed map[string]map[string]bool, pkgs map[string]pkg) []string {
	var out []string
	for name, p := range pkgs {
		may, ok := allowed[name]
		if !ok {
			out = append(out, name+" is in no rule of deps_test.go's layers: place it above what it imports")
			continue
		}
		for _, imp := range p.Imports {
			if o := ours(imp); o != "" && !may[o] {
				out = append(out, name+" imports "+o+", which its layer does not allow (deps_test.go): the import runs up or across")
			}
		}
	}
	for name := range allowed {
		if _, ok := pkgs[name]; !ok {
			out = append(out, "deps_test.go's layers name "+name+", which is no package of the module")
		}
	}
	slices.Sort(out)
	return out
}

// TestPodHalvesApart: the sidecar and the bridge, two containers of a pod, do not import each
// other even in their tests (each plays the other with a fake over gRPC).
func TestPodHalvesApart(t *testing.T) {
	for name, p := range list(t) {
		for side, other := range map[string]string{"bridge": "sidecar", "sidecar": "bridge"} {
			if name != side && !strings.HasPrefix(name, side+"/") {
				continue
			}
			for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
				if o := ours(imp); o == other || strings.HasPrefix(o, other+"/") {
					t.Errorf("%s (its tests included) imports %s: the two halves of a pod meet only over gRPC", name, o)
				}
			}
		}
	}
}

// TestNeverLinks: the packages of neverLinks link none of what they must not.
func TestNeverLinks(t *testing.T) {
	pkgs := list(t)
	for _, rule := range neverLinks {
		for _, name := range rule.pkgs {
			p, ok := pkgs[name]
			if !ok {
				t.Errorf("neverLinks names %s, which is no package of the module", name)
				continue
			}
			for _, dep := range p.Deps {
				for _, b := range rule.banned {
					if dep == b || matches(b, dep) {
						t.Errorf("%s links %s: %s", name, dep, rule.why)
					}
				}
			}
		}
	}
}

// matches says whether pattern, a path ending in "/...", covers path.
func matches(pattern, path string) bool {
	dir, ok := strings.CutSuffix(pattern, "/...")
	return ok && (path == dir || strings.HasPrefix(path, dir+"/"))
}

// TestLayersCatchAnImportUp: the check itself fails on an import that runs up or across: a
// root internal leaf importing an application or a container, the two containers importing
// each other, stdio or the Go SDK importing the engine, protocol importing a leaf above it.
func TestLayersCatchAnImportUp(t *testing.T) {
	allowed := parseLayers(t, layers)
	for _, c := range []struct{ from, to string }{
		{"internal/settings", "sidecar"},
		{"internal/kafkaconn", "cmd/millrace/internal/replay"},
		{"bridge", "sidecar"},
		{"sidecar", "bridge/actionconf"},
		{"stdio", "stdio/engine"},
		{"stdio/action", "stdio/engine"},
		{"protocol", "internal/settings"},
	} {
		pkgs := map[string]pkg{}
		for name := range allowed {
			pkgs[name] = pkg{ImportPath: mod + name}
		}
		pkgs[c.from] = pkg{ImportPath: mod + c.from, Imports: []string{mod + c.to}}
		if v := violations(allowed, pkgs); len(v) != 1 || !strings.Contains(v[0], c.from+" imports "+c.to) {
			t.Errorf("%s importing %s: violations = %q; want that one import named", c.from, c.to, v)
		}
	}
}
