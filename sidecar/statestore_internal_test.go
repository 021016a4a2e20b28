package sidecar

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/sidecar/internal/state"
)

// TestKeepRevoked: a revoked partition's store file waits StateKeepRevoked on the sidecar's
// clock, then is deleted; one whose partition comes back first, or whose sidecar's Run ends
// first, stays; and every wait has ended once closeStores returns.
func TestKeepRevoked(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before the time is up: nothing, the partition assigned again, or Run's end
		then     func(s *Sidecar, p *partition)
		deleted  bool
		fireTime bool
	}{
		{name: "time up", then: func(*Sidecar, *partition) {}, deleted: true, fireTime: true},
		{name: "assigned again", then: func(s *Sidecar, p *partition) {
			s.mu.Lock()
			p.owned = true
			s.assignState(p)
			s.stopRestoreLocked(p) // the restore it starts is not this test's
			s.mu.Unlock()
		}},
		{name: "run ends", then: func(s *Sidecar, _ *partition) { s.closeStores() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			const topic = "shop.count.in.state"
			st, _, err := state.Open(dir, topic, 0, state.Options{BootID: "test"})
			if err != nil {
				t.Fatal(err)
			}
			asked := make(chan time.Duration, 1)
			fire := make(chan time.Time)
			s := &Sidecar{cfg: Config{StateDir: dir, StateKeepRevoked: time.Hour}, log: slog.New(slog.DiscardHandler),
				after: func(d time.Duration) <-chan time.Time { asked <- d; return fire }}
			s.stateCtx, s.stopState = context.WithCancel(context.Background())
			p := &partition{tp: tp{"in", 0}, inlet: &Inlet{Port: "in", Topic: "in", StateTopic: topic}}
			s.order = []*partition{p}

			s.keepRevoked(map[*partition]*state.Partition{p: st})
			select {
			case d := <-asked:
				if d != time.Hour {
					t.Errorf("the kept file waits %v; want StateKeepRevoked, 1h", d)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the kept file's wait never asked the clock")
			}
			tc.then(s, p)
			if tc.fireTime {
				fire <- time.Time{}
			}
			s.closeStores() // waits for every wait to end
			_, err = os.Stat(state.Path(dir, topic, 0))
			if gone := errors.Is(err, fs.ErrNotExist); gone != tc.deleted {
				t.Errorf("store file deleted = %v (stat: %v); want %v", gone, err, tc.deleted)
			}
		})
	}
}
