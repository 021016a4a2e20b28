package settings_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/settings"
)

// side is a side's config, as the sidecar's and the bridge's are.
type side struct {
	Port       int
	Budget     int64
	StuckAfter time.Duration
	Mode       string
	File       string
	Keep       bool
}

// table is a side's settings. FLOW_STUCK_AFTER is a new setting: a field of side and this one
// row, and nothing else; TestNewSettingIsOneRow shows that the row alone defaults it, fills a
// hand-built config's zero, reads and bounds it, and lists it in -h and the docs.
var table = settings.Table[side]{
	settings.Port("X_PORT", func(c *side) *int { return &c.Port }, 9010, "the port").KeepZero(),
	settings.Size("X_BUDGET", func(c *side) *int64 { return &c.Budget }, 64<<20, 1<<10, 0, "a budget"),
	settings.Duration("FLOW_STUCK_AFTER", func(c *side) *time.Duration { return &c.StuckAfter }, 2*time.Minute, time.Second, "a partition with records waiting and no batch in flight this long is stuck").
		Doc("a partition with records waiting and no batch in flight this long is reported stuck"),
	settings.Enum("X_MODE", func(c *side) *string { return &c.Mode }, "slow", "slow or fast", func(s string) (string, error) {
		if s != "slow" && s != "fast" {
			return "", fmt.Errorf("X_MODE=%s is neither slow nor fast", s)
		}
		return s, nil
	}),
	settings.String("X_FILE", func(c *side) *string { return &c.File }, "", "a file; unset, none"),
	settings.Bool("X_KEEP", func(c *side) *bool { return &c.Keep }, false, "keep it"),
	settings.Info[side]("X_REQUIRED", "required", "read elsewhere"),
}

// TestNewSettingIsOneRow: one row defaults its field, gives a hand-built config's zero field
// the default (unless KeepZero), reads the variable within its bounds, names it in each
// problem, and prints it in -h and the docs table.
func TestNewSettingIsOneRow(t *testing.T) {
	var d side
	table.Defaults(&d)
	if want := (side{Port: 9010, Budget: 64 << 20, StuckAfter: 2 * time.Minute, Mode: "slow"}); d != want {
		t.Errorf("Defaults = %+v; want %+v", d, want)
	}

	hand := side{Budget: 5000}
	table.FillZero(&hand)
	if want := (side{Budget: 5000, StuckAfter: 2 * time.Minute, Mode: "slow"}); hand != want {
		t.Errorf("FillZero = %+v; want %+v (the port kept at zero)", hand, want)
	}

	c := d
	r := settings.NewReader(env(map[string]string{"FLOW_STUCK_AFTER": " 30s ", "X_MODE": "fast", "X_KEEP": "true", "X_FILE": "/f"}))
	table.Read(r, &c)
	if want := (side{Port: 9010, Budget: 64 << 20, StuckAfter: 30 * time.Second, Mode: "fast", File: "/f", Keep: true}); c != want || len(r.Problems()) > 0 {
		t.Errorf("Read = %+v, %q; want %+v and no problem", c, r.Problems(), want)
	}

	c = d
	r = settings.NewReader(env(map[string]string{"FLOW_STUCK_AFTER": "10ms", "X_MODE": "medium", "X_PORT": "0", "X_BUDGET": "1"}))
	table.Read(r, &c)
	if c != d {
		t.Errorf("Read of bad values = %+v; want the defaults kept %+v", c, d)
	}
	got := strings.Join(r.Problems(), "\n")
	for _, name := range []string{"X_PORT=0", "X_BUDGET=1", "FLOW_STUCK_AFTER=10ms is not a duration of at least 1s", "X_MODE=medium is neither slow nor fast"} {
		if !strings.Contains(got, name) {
			t.Errorf("problems %q do not name %s", got, name)
		}
	}

	vars := table.Vars()
	if len(vars) != len(table) || vars[2].Name != "FLOW_STUCK_AFTER" || vars[2].Default != "2m" {
		t.Errorf("Vars = %+v; want every row, FLOW_STUCK_AFTER with its default 2m", vars)
	}
	md := settings.Markdown(vars)
	for _, row := range []string{
		"| `FLOW_STUCK_AFTER` | `2m` | a partition with records waiting and no batch in flight this long is reported stuck |\n",
		"| `X_BUDGET` | `64Mi` | a budget |\n",
		"| `X_FILE` | — | a file; unset, none |\n",
		"| `X_REQUIRED` | required | read elsewhere |\n",
	} {
		if !strings.Contains(md, row) {
			t.Errorf("Markdown has no row %q:\n%s", row, md)
		}
	}
}

// TestRowOptions: Shown, Code and Then.
func TestRowOptions(t *testing.T) {
	row := settings.Duration("X_EVERY", func(c *side) *time.Duration { return &c.StuckAfter }, time.Second, 0, "how often; 0 always").
		Then(func(c *side) {
			if c.StuckAfter == 0 {
				c.StuckAfter = -1
			}
		})
	var c side
	settings.Table[side]{row}.Read(settings.NewReader(env(map[string]string{"X_EVERY": "0"})), &c)
	if c.StuckAfter != -1 {
		t.Errorf("Then: X_EVERY=0 read as %v; want -1", c.StuckAfter)
	}
	group := settings.String("X_GROUP", func(c *side) *string { return &c.File }, "", "the group").Shown("<a>.<b>")
	if md := settings.Markdown([]settings.Var{group.Var, group.Code().Var}); !strings.Contains(md, "| `X_GROUP` | <a>.<b> |") || !strings.Contains(md, "| `X_GROUP` | `<a>.<b>` |") {
		t.Errorf("Shown and Code: %s", md)
	}
}
