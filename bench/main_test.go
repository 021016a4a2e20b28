package bench_test

import (
	"os"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.Main(m, runRole, func() {
		if bins.dir != "" {
			os.RemoveAll(bins.dir)
		}
	})
}

// TestHelpers checks the figures the benchmarks report are computed right.
func TestHelpers(t *testing.T) {
	for _, size := range []int{96, 200, 1000, 10 << 10} {
		if got := len(value(7, size)); got != size {
			t.Errorf("len(value(7, %d)) = %d; want %d", size, got, size)
		}
	}
	for _, tc := range []struct {
		in     string
		want   int
		wantOK bool
	}{
		{string(value(42, 200)), 42, true},
		{`{"id": 7, "name": "listing-42"}`, 7, true}, // as Python's json.dumps writes it
		{`{"name":"x","id":3}`, 0, false},
		{`{"id":"3"}`, 0, false},
		{``, 0, false},
	} {
		if got, ok := recordNumber([]byte(tc.in)); got != tc.want || ok != tc.wantOK {
			t.Errorf("recordNumber(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
	for _, tc := range []struct {
		i, keys, parts int
		key            string
		partition      int32
	}{{0, 1000, 8, "k0", 0}, {1009, 1000, 8, "k9", 1}, {2009, 1000, 1, "k9", 0}, {7, 5, 3, "k2", 2}} {
		if key, p := recordKey(tc.i, tc.keys, tc.parts); string(key) != tc.key || p != tc.partition {
			t.Errorf("recordKey(%d, %d, %d) = %q, %d; want %q, %d", tc.i, tc.keys, tc.parts, key, p, tc.key, tc.partition)
		}
	}
	for _, tc := range []struct {
		in   runs
		want float64
	}{
		{nil, 0}, {runs{3}, 3}, {runs{5, 1, 3}, 3}, {runs{4, 1, 3, 2}, 2.5},
	} {
		if got := tc.in.median(); got != tc.want {
			t.Errorf("runs%v.median() = %v; want %v", []float64(tc.in), got, tc.want)
		}
	}
	var ds []time.Duration
	for i := 1; i <= 1000; i++ {
		ds = append(ds, time.Duration(1001-i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 500 * time.Millisecond}, {99, 990 * time.Millisecond}, {100, 1000 * time.Millisecond}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("percentile(1..1000 ms, %v) = %v; want %v", tc.p, got, tc.want)
		}
	}
}
