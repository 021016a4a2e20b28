package actiondir_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
)

// TestTimeoutZeroSameEverywhere: `millrace run` (which serves a.Action through the bridge) and
// `millrace test` (a.Conformance) get the same parsed --timeout 0s: no timeout in both.
func TestTimeoutZeroSameEverywhere(t *testing.T) {
	a, err := actiondir.Load("s --in in=x.v1 --timeout 0s -- prog")
	if err != nil {
		t.Fatal(err)
	}
	if a.Timeout != 0 {
		t.Errorf("run: Timeout = %v, want 0 (none)", a.Timeout)
	}
	if c := a.Conformance("v"); c.Timeout != 0 || c.Action.Name != "s" {
		t.Errorf("test: Timeout = %v (action %q), want 0 (none) for s", c.Timeout, c.Action.Name)
	}
}

// TestLoadNoAction: a word that is neither a path nor a config line is ErrNoAction, with the
// stat's error in the chain; a directory without action.conf is ErrNoAction too.
func TestLoadNoAction(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing-here")
	if _, err := actiondir.Load(missing); !errors.Is(err, actiondir.ErrNoAction) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(%s) = %v; want an error wrapping ErrNoAction and fs.ErrNotExist", missing, err)
	}
	if _, err := actiondir.Load(t.TempDir()); !errors.Is(err, actiondir.ErrNoAction) {
		t.Errorf("Load(an empty directory) = %v; want an error wrapping ErrNoAction", err)
	}
}
