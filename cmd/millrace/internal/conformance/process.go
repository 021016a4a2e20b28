package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/ankka-flow/millrace/stdio/engine"
)

// proc is one running action process with its pipes read on owned goroutines: stdout turned
// into events, stderr counted and its last lines kept, stdin written from a queue so the
// driver never blocks on a child that stopped reading.
type proc struct {
	child   *engine.Child
	stdin   io.WriteCloser
	writes  chan []byte
	events  chan event
	done    chan struct{} // closed when the process exited and its pipes were read to the end
	exitErr error         // valid once done is closed
	endNote string        // how stdout ended, when not cleanly (valid once events is closed)
	tooLong bool          // stdout ended on a line over the limit: a framing fault, not a crash
	stderr  *stderrLog
	started time.Time

	inClosed bool           // stdin's queue is closed (driver goroutine only)
	wg       sync.WaitGroup // the writer goroutine
}

// startProc starts a's command in a.Dir with MILLSTREAM_WORKDIR set to a fresh folder under
// workdir.
func startProc(a *Action, workdir string, stderrMax int) (*proc, error) {
	if len(a.Command) == 0 {
		return nil, fmt.Errorf("%w: action %q has no command", errAction, a.Name)
	}
	wd, err := os.MkdirTemp(workdir, "work-")
	if err != nil {
		return nil, fmt.Errorf("a work folder for action %q: %w", a.Name, err)
	}
	p := &proc{
		writes: make(chan []byte, 4096), events: make(chan event, 256),
		done: make(chan struct{}), stderr: &stderrLog{max: stderrMax},
	}
	p.child = &engine.Child{
		Argv:   a.Command,
		Dir:    a.Dir,
		Env:    append(append(os.Environ(), "MILLSTREAM_WORKDIR="+wd), a.Env...),
		Stdout: p.readStdout,
		Stderr: p.stderr.read,
	}
	if err := p.child.Start(); err != nil {
		return nil, fmt.Errorf("%w: action %q: cannot start %q in %s: %w (check the command after -- in the config line)", errAction, a.Name, strings.Join(a.Command, " "), dirName(a.Dir), err)
	}
	p.stdin, p.started = p.child.Stdin(), time.Now()
	p.wg.Go(p.writer)
	go func() {
		p.exitErr = p.child.Wait() // the pipes read to their end (or closed after the grace) first
		close(p.done)
	}()
	return p, nil
}

func dirName(dir string) string {
	if dir == "" {
		return "the current folder"
	}
	return dir
}

// write queues line for stdin; it never blocks the driver (up to the queue's 4096 lines). After
// closeStdin the line is dropped. write and closeStdin are called from the driver's goroutine.
func (p *proc) write(line []byte) {
	if p.inClosed {
		return
	}
	p.writes <- line
}

// closeStdin closes stdin once every queued line is written. It may be called more than once.
func (p *proc) closeStdin() {
	if !p.inClosed {
		p.inClosed = true
		close(p.writes)
	}
}

func (p *proc) writer() {
	failed := false
	for line := range p.writes {
		if failed {
			continue
		}
		if _, err := p.stdin.Write(line); err != nil {
			failed = true // the child is gone or closed stdin; its exit tells why
		}
	}
	_ = p.stdin.Close()
}

// kill kills the process group and waits until everything of the process is gone. It may be
// called more than once.
func (p *proc) kill() {
	p.child.Kill()
	p.closeStdin()
	for range p.events { // let the stdout reader finish
	}
	<-p.done
	p.wg.Wait()
}

// exitStatus describes how the process ended, once done is closed.
func (p *proc) exitStatus() (code int, desc string) {
	var ee *exec.ExitError
	switch {
	case p.exitErr == nil:
		return 0, "exited with status 0"
	case errors.As(p.exitErr, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode(), fmt.Sprintf("exited with status %d", ee.ExitCode())
	case errors.As(p.exitErr, &ee):
		return -1, "was killed (" + ee.String() + ")"
	default:
		return -1, p.exitErr.Error()
	}
}

// waitCtx waits for ch or ctx.
func waitCtx(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
