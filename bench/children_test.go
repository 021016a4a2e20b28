package bench_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
