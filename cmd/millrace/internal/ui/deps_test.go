package ui_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSidecarAndBridgeLinkNoPage: the packages of millrace sidecar and millrace bridge (and
// the action protocol's) link nothing of the page: neither it nor chromedp.
func TestSidecarAndBridgeLinkNoPage(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH (%v): this test asks it what the sidecar and the bridge link", err)
	}
	const mod = "github.com/ankka-flow/millrace/"
	out, err := exec.Command(goCmd, "list", "-deps", mod+"sidecar/...", mod+"bridge/...", mod+"stdio/...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 20 {
		t.Fatalf("go list -deps listed %d packages, too few to be the sidecar's and the bridge's: %q", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		for _, banned := range []string{mod + "cmd/millrace/internal/ui", mod + "cmd/millrace/internal/local", "github.com/chromedp"} {
			if p == banned || strings.HasPrefix(p, banned+"/") {
				t.Errorf("the sidecar, the bridge or stdio links %s: the page is millrace run's only", p)
			}
		}
	}
}
