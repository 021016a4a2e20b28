package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"go.uber.org/goleak"
)

// EnvRole names the role the test binary plays when a test starts it as a child process (an
// action, a sidecar, a bridge): the test binary plays the child, so a test needs no other program.
const EnvRole = "MILLRACE_TEST_ROLE"

// RoleEnv is the environment entry that makes the test binary play role.
func RoleEnv(role string) string { return EnvRole + "=" + role }

// Play, first in a TestMain: when the test binary was started to play a role (EnvRole set),
// it calls play with the role and exits with its code; otherwise it returns.
func Play(play func(role string) int) {
	if role := os.Getenv(EnvRole); role != "" {
		os.Exit(play(role))
	}
}

// Main is a whole TestMain: Play(play) (play nil: the binary plays nothing), the tests, then
// after (if not nil), then a goroutine leak check when the tests passed.
func Main(m *testing.M, play func(role string) int, after func(), opts ...goleak.Option) {
	if play != nil {
		Play(play)
	}
	code := m.Run()
	if s := skippedSummary(); s != "" {
		fmt.Fprint(os.Stderr, s)
	}
	if after != nil {
		after()
	}
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Command returns a command running the test binary as role with args, in this process's
// environment plus RoleEnv(role).
func Command(ctx context.Context, role string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), RoleEnv(role))
	return cmd
}
