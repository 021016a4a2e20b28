package main

import (
	"net"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// TestRunFlags: every flag of run does something, so one that would do nothing, or a value
// that cannot work, is an error naming it; --metrics serves the run's metrics; --data says
// where the in-process broker listens.
func TestRunFlags(t *testing.T) {
	testkit.NeedTools(t, "python3") // actions/score-listing
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	const dir = "../../actions/score-listing"
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--data", t.TempDir(), "--brokers", "127.0.0.1:1"}, 2, "give one or the other"},
		{[]string{"--partitions", "0"}, 2, "--partitions 0"},
		{[]string{"--stall", "0s"}, 2, "--stall 0s"},
		{[]string{"--metrics", taken.Addr().String()}, 1, "--metrics " + taken.Addr().String()},
		{[]string{"--metrics", "127.0.0.1:0"}, 0, "metrics at http://127.0.0.1:"},
		{[]string{"--no-such-flag"}, 2, "not defined: -no-such-flag"},
		// where other tools (millrace replay) find the broker while the run goes on
		{[]string{"--data", t.TempDir()}, 0, "the in-process Kafka broker listens at 127.0.0.1:"},
		// the page: loopback only, its address after =
		{[]string{"--ui=0.0.0.0:0"}, 1, "the page listens on loopback only"},
		{[]string{"--ui=:0"}, 1, "give 127.0.0.1:PORT"},
		{[]string{"--ui", "127.0.0.1:0"}, 2, "--ui takes its address after =: --ui=127.0.0.1:0"},
		{[]string{"--ui=" + taken.Addr().String()}, 1, "--ui " + taken.Addr().String()},
	}
	for _, tt := range tests {
		code, _, errOut := runCmd(t, append([]string{"run", dir}, tt.args...)...)
		if code != tt.code || !strings.Contains(errOut, tt.want) {
			t.Errorf("run %s %v = %d, %q; want %d naming %q", dir, tt.args, code, errOut, tt.code, tt.want)
		}
	}
}
