//go:build linux || darwin

package engine

import (
	"errors"
	"syscall"
	"unsafe"
)

// pPID is waitid's idtype for one process id (P_PID, 1 on Linux and the BSDs).
const pPID = 1

// awaitExit blocks until the process pid has exited, without reaping it (waitid with WNOWAIT):
// the zombie keeps its process id and so its group's id, which no new process can take until
// the zombie is reaped. A signal to the group sent now cannot reach a stranger.
func awaitExit(pid int) error {
	var siginfo [128]byte
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&siginfo[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if e == 0 {
			return nil
		}
		if !errors.Is(e, syscall.EINTR) {
			return e
		}
	}
}
