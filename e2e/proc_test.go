package e2e_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a process under test: started in its own process group, its stdout and stderr in a
// log file, ended by PID at cleanup (SIGTERM, then SIGKILL), with the action processes it
// started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	mu   sync.Mutex
	err  error // the exit, once done is closed
}

// startProc starts bin.millrace with args and the extra environment env; name labels its log.
func startProc(t testing.TB, dir, name string, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin.millrace, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(t, 15*time.Second) })
	return p
}

// cleanEnv is this process's environment without what would change the processes' behaviour:
// no in-cluster Kubernetes (stall warnings are logged), no inherited FLOW_* or MILLRACE_ACTION.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KUBERNETES_") || strings.HasPrefix(kv, "FLOW_") || strings.HasPrefix(kv, "MILLRACE_ACTION=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process (by PID).
func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		syscall.Kill(p.pid(), sig)
	}
}

// stop ends the process: SIGTERM, then SIGKILL after grace, then SIGKILL to the action
// processes it left (found before, by parent PID). It may be called twice.
func (p *proc) stop(t testing.TB, grace time.Duration) {
	if p.exited() {
		return
	}
	kids := descendants(p.pid())
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		t.Logf("%s (pid %d) did not exit within %s of SIGTERM; killing it", p.name, p.pid(), grace)
		syscall.Kill(-p.pid(), syscall.SIGKILL)
		p.signal(syscall.SIGKILL)
		<-p.done
	}
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGKILL)
	}
}

// kill SIGKILLs the process and waits for it; it returns the action processes it had, which
// lose their parent.
func (p *proc) kill() []int {
	kids := descendants(p.pid())
	p.signal(syscall.SIGKILL)
	<-p.done
	return kids
}

// logText returns the process's log so far.
func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// logHas reports whether the log holds s.
func (p *proc) logHas(s string) bool { return strings.Contains(p.logText(), s) }

// logLines returns the log lines holding s, at most max.
func (p *proc) logLines(s string, max int) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(p.logText()))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() && len(out) < max {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// tail returns the last n lines of the log, each cut to 600 bytes.
func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.logText(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 600 {
			lines[i] = l[:600] + "…"
		}
	}
	return strings.Join(lines, "\n")
}

// children returns the PIDs of the direct children of pid, from /proc/PID/task/*/children.
func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// descendants returns every process below pid.
func descendants(pid int) []int {
	var out []int
	for _, c := range children(pid) {
		out = append(out, c)
		out = append(out, descendants(c)...)
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// peakRSS returns VmHWM of pid in KiB, or 0.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
