package engine

import (
	"os"
	"sync"
	"syscall"
)

// live is every Child started and not yet reaped, and every folder the engine made (each
// process's MILLSTREAM_WORKDIR) or was asked to track and not yet removed: what Teardown ends.
var live = struct {
	sync.Mutex
	children map[*Child]struct{}
	dirs     map[string]int
	down     bool // Teardown ran: no process starts any more
}{children: map[*Child]struct{}{}, dirs: map[string]int{}}

// Teardown kills the process group of every Child of this program that is still running and
// removes every MILLSTREAM_WORKDIR and tracked folder left: for a program about to exit at
// once (a second Ctrl-C), so that nothing of its children remains. It does not wait for the
// readers; it is safe to call at any time, from any goroutine. After it no process starts.
func Teardown() {
	live.Lock()
	defer live.Unlock()
	live.down = true
	for c := range live.children {
		_ = c.signal(syscall.SIGKILL)
	}
	for dir := range live.dirs {
		_ = os.RemoveAll(dir)
	}
	clear(live.dirs)
}

// TrackDir makes Teardown remove dir, a folder of the caller's (the conformance kit's
// workdir), until untrack is called once the caller removed it itself.
func TrackDir(dir string) (untrack func()) {
	live.Lock()
	live.dirs[dir]++
	live.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			live.Lock()
			if live.dirs[dir]--; live.dirs[dir] <= 0 {
				delete(live.dirs, dir)
			}
			live.Unlock()
		})
	}
}

// tornDown reports whether Teardown ran.
func tornDown() bool {
	live.Lock()
	defer live.Unlock()
	return live.down
}

func trackChild(c *Child) {
	live.Lock()
	live.children[c] = struct{}{}
	down := live.down
	live.Unlock()
	if down { // started as Teardown ran
		_ = c.signal(syscall.SIGKILL)
	}
}

func untrackChild(c *Child) {
	live.Lock()
	delete(live.children, c)
	live.Unlock()
}
