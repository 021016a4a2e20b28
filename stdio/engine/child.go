package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Child is one command run in its own process group: stdin is a pipe the caller writes,
// stdout and stderr are pipes read to their end by the caller's functions. It is the one
// child-process supervisor of the engine and of the conformance kit.
//
// The contract:
//   - Start runs Argv (no shell; Argv[0] is looked up in PATH) in Dir with exactly Env. Stdout
//     and Stderr run on goroutines of os/exec from Start; each reads its pipe, capping what it
//     keeps, until it returns or the pipe ends (io.EOF once every holder closed it, an error
//     once the grace below closed it). What it leaves unread is discarded to the end.
//   - Kill, and every signal of the engine's, reaches the whole group, and only while its
//     leader is not reaped: after that nothing is sent, since the group's id may be reused.
//   - Wait, called once, waits until the leader exits, then kills what is left of its group
//     (grandchildren die with it and release the pipes they inherited) while the exited
//     leader still holds the group's id, then reaps it. The readers get 2 s from the exit, or
//     from a Kill, to finish; then the pipes are closed under them (a descendant that left the
//     group may hold them open). Wait returns [exec.Cmd.Wait]'s error once the readers
//     returned. The grace is os/exec's own ([exec.Cmd.Cancel] kills the group,
//     [exec.Cmd.WaitDelay] closes the pipes): there is no timer of ours.
type Child struct {
	Argv   []string
	Dir    string
	Env    []string        // the whole environment of the child
	Stdout func(io.Reader) // reads the child's stdout (nil: discarded)
	Stderr func(io.Reader) // reads the child's stderr (nil: discarded)

	cmd    *exec.Cmd
	stdin  *os.File
	cancel context.CancelFunc

	mu     sync.Mutex
	reaped bool // the leader is reaped, or about to be: no more signals to its group
}

// pipeGrace bounds the readers after the child exited or was killed.
const pipeGrace = 2 * time.Second

// Start starts the command. On error nothing is left running and nothing is open.
func (c *Child) Start() error {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return errors.New("no command")
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("creating a pipe: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = c.Env
	cmd.Stdin = stdinR
	cmd.Stdout = readerFunc(c.Stdout)
	cmd.Stderr = readerFunc(c.Stderr)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return c.signal(syscall.SIGKILL) }
	cmd.WaitDelay = pipeGrace
	c.cmd, c.cancel = cmd, cancel
	if err := cmd.Start(); err != nil {
		cancel()
		stdinR.Close()
		stdinW.Close()
		return err
	}
	stdinR.Close()
	c.stdin = stdinW
	trackChild(c)
	return nil
}

// pid returns the process id of the leader (and the id of its group), once started.
func (c *Child) pid() int { return c.cmd.Process.Pid }

// Stdin returns the write end of the child's stdin, once started. The caller closes it.
func (c *Child) Stdin() *os.File { return c.stdin }

// signal sends sig to the child's process group while its leader is not reaped.
func (c *Child) signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reaped {
		return os.ErrProcessDone
	}
	return syscall.Kill(-c.cmd.Process.Pid, sig)
}

// Kill kills the process group now and starts the pipes' grace: after the grace the leader
// is killed again on its own and the pipes are closed, whatever holds them. Before Start it
// does nothing.
func (c *Child) Kill() {
	if c.cancel != nil {
		c.cancel()
	}
}

// Wait waits for the leader's exit and the readers' end, as the type's contract says, and
// returns the exit error. It must be called exactly once, after a successful Start.
func (c *Child) Wait() error {
	if err := awaitExit(c.cmd.Process.Pid); err == nil {
		_ = c.signal(syscall.SIGKILL)
	}
	c.mu.Lock()
	c.reaped = true
	c.mu.Unlock()
	untrackChild(c)
	// The leader exited; WaitDelay's timer starts when Wait sees the exit.
	err := c.cmd.Wait()
	c.cancel()
	return err
}

// readerFunc hands the pipe os/exec reads to a reading function: io.Copy passes its source to
// an io.ReaderFrom, so the function reads the pipe itself, with no copy in between.
type readerFunc func(io.Reader)

// ReadFrom runs the function on r, then discards what is left until r ends.
func (f readerFunc) ReadFrom(r io.Reader) (int64, error) {
	if f != nil {
		f(r)
	}
	return io.Copy(io.Discard, r)
}

// Write is never called: io.Copy prefers ReadFrom.
func (f readerFunc) Write([]byte) (int, error) {
	return 0, errors.New("engine: a child's output reached Write, not ReadFrom")
}
