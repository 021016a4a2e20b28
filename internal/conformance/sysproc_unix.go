//go:build unix

package conformance

import (
	"os/exec"
	"syscall"
)

// setGroup puts the child in its own process group, so killGroup reaches its grandchildren
// too (a shell script's jq, a `go run`'s built binary).
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills the child's whole process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
