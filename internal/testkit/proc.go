package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// errProcKilled is returned by Proc.Stop when the process did not exit within its grace after
// SIGTERM and was killed.
var errProcKilled = errors.New("testkit: the process did not exit within its grace after SIGTERM and was killed")

// ProcSpec says how to start a Proc.
type ProcSpec struct {
	Name string   // labels the process in messages
	Argv []string // the program and its arguments
	Env  []string // added to CleanEnv()
	Dir  string   // the working directory ("": this process's)
	Log  string   // the file its stdout and stderr go to, created or truncated
	// Grace is how long the cleanup waits after SIGTERM before it kills the process (0: 15 s).
	Grace time.Duration
	// Strict makes the cleanup fail the test when the process had to be killed or exited with
	// an error; otherwise the cleanup only logs that.
	Strict bool
}

// Proc is a process under test: started in its own process group, its stdout and stderr in a
// log file, ended by PID when the test ends (SIGTERM, then SIGKILL to its group after the
// grace, then SIGKILL to the processes it had started).
type Proc struct {
	Name string
	Log  string // the path of its log

	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit, set before done is closed
}

// StartProc starts the process spec describes; it is stopped when the test ends (the
// cleanups of processes run in the reverse order of their starts).
func StartProc(t testing.TB, spec ProcSpec) *Proc {
	t.Helper()
	f, err := os.Create(spec.Log)
	if err != nil {
		t.Fatalf("testkit: the log of %s: %v", spec.Name, err)
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Env = append(CleanEnv(), spec.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = spec.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("testkit: start %s: %v", spec.Name, err)
	}
	p := &Proc{Name: spec.Name, Log: spec.Log, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	grace := spec.Grace
	if grace == 0 {
		grace = 15 * time.Second
	}
	t.Cleanup(func() {
		err := p.Stop(grace)
		switch {
		case err == nil:
		case spec.Strict:
			t.Errorf("%v\n%s", err, p.Tail(20))
		default:
			t.Log(err)
		}
	})
	return p
}

// CleanEnv is this process's environment without what would change a child's behaviour: no
// in-cluster Kubernetes (stall warnings are logged), no inherited FLOW_*, MILLRACE_ACTION or
// role of the test binary.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KUBERNETES_") || strings.HasPrefix(kv, "FLOW_") ||
			strings.HasPrefix(kv, "MILLRACE_ACTION=") || strings.HasPrefix(kv, EnvRole+"=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// Pid is the process's PID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and its log is closed.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit (nil for status 0); it is meaningful once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process (by PID) unless it has exited.
func (p *Proc) Signal(sig syscall.Signal) {
	if !p.Exited() {
		_ = syscall.Kill(p.Pid(), sig)
	}
}

// Stop ends the process: SIGCONT (it may be paused) and SIGTERM, then SIGKILL to its group after grace, then SIGKILL to the
// processes below it (found before the SIGTERM). It returns an error wrapping errProcKilled
// when it had to kill, or the exit error. It may be called twice.
func (p *Proc) Stop(grace time.Duration) error {
	if p.Exited() {
		return p.exitErr()
	}
	kids := descendants(p.Pid())
	p.Signal(syscall.SIGCONT) // a paused process (SIGSTOP) would not see the SIGTERM
	p.Signal(syscall.SIGTERM)
	var err error
	select {
	case <-p.done:
		err = p.exitErr()
	case <-time.After(grace):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		p.Signal(syscall.SIGKILL)
		<-p.done
		err = fmt.Errorf("%s (pid %d), %s: %w", p.Name, p.Pid(), grace, errProcKilled)
	}
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	return err
}

func (p *Proc) exitErr() error {
	if p.err != nil {
		return fmt.Errorf("%s (pid %d) exited: %w", p.Name, p.Pid(), p.err)
	}
	return nil
}

// Kill SIGKILLs the process and waits for it; it returns the processes below it, which lose
// their parent (and are not killed).
func (p *Proc) Kill() []int {
	kids := descendants(p.Pid())
	p.Signal(syscall.SIGKILL)
	<-p.done
	return kids
}

// LogText returns the process's log so far.
func (p *Proc) LogText() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// LogHas reports whether the log holds s.
func (p *Proc) LogHas(s string) bool { return strings.Contains(p.LogText(), s) }

// LogLines returns the log lines holding s, at most max.
func (p *Proc) LogLines(s string, max int) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(p.LogText()))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() && len(out) < max {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// Tail returns the last n lines of the log, each cut to 600 bytes.
func (p *Proc) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.LogText(), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	for i, l := range lines {
		if len(l) > 600 {
			lines[i] = l[:600] + "…"
		}
	}
	return strings.Join(lines, "\n")
}

// Status returns a size field of the process's /proc/PID/status (VmRSS, VmHWM) in bytes, or
// 0 (the process has exited).
func (p *Proc) Status(field string) int64 { return ProcStatus(p.Pid(), field) }

// ProcStatus returns a size field of /proc/PID/status (VmRSS, VmHWM) in bytes, or 0.
func ProcStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Children returns the PIDs of the direct children of pid, from /proc/PID/task/*/children.
func Children(pid int) []int {
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
	for _, c := range Children(pid) {
		out = append(out, c)
		out = append(out, descendants(c)...)
	}
	return out
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}
