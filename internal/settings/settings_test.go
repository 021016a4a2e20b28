package settings_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/settings"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestForms: every form a side accepts, the same for both: surrounding whitespace dropped,
// sizes in bytes or with a unit, blank as unset.
func TestForms(t *testing.T) {
	r := settings.NewReader(env(map[string]string{
		"PORT": " 9010\n", "SIZE_BYTES": "67108864", "SIZE_UNIT": " 64Mi ", "SIZE_K": "65536Ki", "SIZE_G": "1G",
		"DUR": "\t10s ", "DUR_MIX": "1m30s", "BLANK": "   ", "GEN": " 7 ", "N": "12", "B": " false ",
	}))
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"PORT", r.Port("PORT", 1), 9010},
		{"unset port", r.Port("NONE", 9011), 9011},
		{"SIZE_BYTES", r.Size("SIZE_BYTES", 1, 1, 0), int64(64 << 20)},
		{"SIZE_UNIT", r.Size("SIZE_UNIT", 1, 1, 0), int64(64 << 20)},
		{"SIZE_K", r.Size("SIZE_K", 1, 1, 0), int64(64 << 20)},
		{"SIZE_G", r.Size("SIZE_G", 1, 1, 0), int64(1e9)},
		{"DUR", r.Duration("DUR", time.Second, 1), 10 * time.Second},
		{"DUR_MIX", r.Duration("DUR_MIX", time.Second, 1), 90 * time.Second},
		{"BLANK", r.Duration("BLANK", time.Second, 1), time.Second},
		{"GEN", r.Uint("GEN", 0), uint64(7)},
		{"N", r.Int("N", 1, 1), 12},
		{"B", r.Bool("B", true), false},
		{"String", r.String("BLANK", "def"), "def"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %v; want %v", tt.name, tt.got, tt.want)
		}
	}
	if err := r.Err(); err != nil {
		t.Errorf("Err() = %v; want nil", err)
	}
}

// TestProblems: every bad value is a problem naming the variable, its value and an accepted
// form; all of them are reported at once, and the defaults stand in meanwhile.
func TestProblems(t *testing.T) {
	r := settings.NewReader(env(map[string]string{
		"PORT": "90x", "PORT_HIGH": "65536", "SIZE": "lots", "SMALL": "12", "BIG": "3Gi",
		"DUR": "10", "ZERO": "0s", "NEG": "-1s", "GEN": "-1", "N": "0", "B": "maybe",
	}))
	if got := r.Port("PORT", 9010); got != 9010 {
		t.Errorf("Port(bad) = %d; want the default", got)
	}
	r.Port("PORT_HIGH", 9010)
	if got := r.Size("SIZE", 64<<20, 1, 0); got != 64<<20 {
		t.Errorf("Size(bad) = %d; want the default", got)
	}
	r.Size("SMALL", 64<<20, 1<<10, 0)
	r.Size("BIG", 4<<20, 2<<10, 1<<31-1)
	r.Duration("DUR", 10*time.Second, 1)
	r.Duration("ZERO", 10*time.Second, 1)
	r.Duration("NEG", 10*time.Second, 0)
	r.Uint("GEN", 0)
	r.Int("N", 100, 1)
	r.Bool("B", true)
	want := []string{
		"PORT=90x is not a TCP port: write a whole number from 1 to 65535, e.g. 9010",
		"PORT_HIGH=65536 is not a TCP port",
		"SIZE=lots is not a size of at least 1: write bytes or a unit, e.g. 64Mi or 67108864",
		"SMALL=12 is not a size of at least 1Ki",
		"BIG=3Gi is not a size from 2Ki to 2147483647",
		"DUR=10 is not a positive duration: write a number and a unit (ms, s, m, h), e.g. 10s",
		"ZERO=0s is not a positive duration",
		"NEG=-1s is not a duration of 0 or more",
		"GEN=-1 is not a whole number from 0 up",
		"N=0 is not a whole number of at least 1",
		"B=maybe is neither true nor false",
	}
	got := r.Problems()
	if len(got) != len(want) {
		t.Fatalf("Problems() = %q; want %d of them", got, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("problem %d = %q; want it to start %q", i, got[i], w)
		}
	}
	err := r.Err()
	if !errors.Is(err, settings.ErrSettings) || !strings.HasPrefix(err.Error(), "bad deploy settings") || !strings.Contains(err.Error(), want[0]) {
		t.Errorf("Err() = %v; want an error matching ErrSettings, naming every problem and no side (its caller does)", err)
	}
}

// TestFormatRoundTrip: what the tables write as a default reads back as the same value.
func TestFormatRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 1000, 1 << 10, 1 << 20, 64 << 20, 3<<30 + 1<<20, 1<<31 - 1, 1 << 40} {
		if got, err := settings.ParseSize(settings.FormatSize(n)); err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v; want %d", n, settings.FormatSize(n), got, err, n)
		}
	}
	for in, want := range map[int64]string{64 << 20: "64Mi", 1 << 10: "1Ki", 1000: "1000", 1 << 30: "1Gi"} {
		if got := settings.FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q; want %q", in, got, want)
		}
	}
	for in, want := range map[time.Duration]string{5 * time.Minute: "5m", 45 * time.Second: "45s", 100 * time.Millisecond: "100ms", 90 * time.Second: "1m30s", 2 * time.Hour: "2h", 0: "0s"} {
		if got := settings.FormatDuration(in); got != want {
			t.Errorf("FormatDuration(%v) = %q; want %q", in, got, want)
		}
		if got, err := settings.ParseDuration(settings.FormatDuration(in)); err != nil || got != in {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", settings.FormatDuration(in), got, err, in)
		}
	}
}
