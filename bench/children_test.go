package bench_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// cpuOf is the CPU time each live child process of this process has used, by pid.
type cpuOf map[int]time.Duration

// childrenCPU reads the CPU time of every live child of this process (every thread's
// /proc/self/task/TID/children: a child belongs to the thread that forked it).
func childrenCPU() cpuOf {
	cpu := cpuOf{}
	files, _ := filepath.Glob("/proc/self/task/*/children")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		for _, s := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(s); err == nil {
				cpu[pid] = procCPU(pid)
			}
		}
	}
	return cpu
}

// since is the CPU the children used from before to now: a child alive at both counts its
// difference, one started since counts whole, one that exited since counts nothing of the
// interval (its last figure is lost with it).
func (now cpuOf) since(before cpuOf) time.Duration {
	var d time.Duration
	for pid, c := range now {
		d += c - before[pid]
	}
	return d
}

// spinCPU is the CPU the spin role burns before it says so.
const spinCPU = 150 * time.Millisecond

// spin is the test binary's "spin" role: it burns spinCPU of CPU, writes "spun" on stdout,
// and waits for stdin to close.
func spin() error {
	for x := uint64(1); cpuTime() < spinCPU; {
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if x == 0 {
			fmt.Println() // never: keeps the loop from being optimised away
		}
	}
	if _, err := fmt.Println("spun"); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, os.Stdin)
	return err
}

// TestChildrenOf checks that childrenOf counts a child's CPU once: while the child runs, from
// its own /proc entry; once it is reaped, from this process's cutime, as much as its wait
// status says it used.
func TestChildrenOf(t *testing.T) {
	// /proc's figures are whole ticks (USER_HZ), user and system time each rounded down.
	const slack = 2 * 10 * time.Millisecond
	self := os.Getpid()
	before := childrenOf(self)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(testkit.CleanEnv(), testkit.RoleEnv("spin"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "spun\n" {
		stdin.Close()
		t.Fatalf("the spinning child said %q, %v; want spun", line, err)
	}
	alive := childrenOf(self) - before
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	reaped := childrenOf(self) - before
	used := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if alive < spinCPU-slack {
		t.Errorf("childrenOf grew by %v while the child ran; want at least the %v it burnt", alive, spinCPU)
	}
	if reaped < alive || reaped > used+slack || reaped < used-slack {
		t.Errorf("childrenOf grew by %v once the child was reaped (%v while it ran); want the %v its wait status says, within two ticks", reaped, alive, used)
	}
}
