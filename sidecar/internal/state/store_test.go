package state_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/sidecar/internal/state"
	"go.etcd.io/bbolt"
)

const topic = "listings.count.events.state"

func open(t *testing.T, dir string, o state.Options) (*state.Partition, state.Checkpoint) {
	t.Helper()
	p, cp, err := state.Open(dir, topic, 3, o)
	if err != nil {
		t.Fatalf("Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() { p.Close() })
	return p, cp
}

func set(key, value string, written int64) state.Entry {
	return state.Entry{Key: []byte(key), Value: []byte(value), Written: written}
}

func del(key string) state.Entry { return state.Entry{Key: []byte(key)} }

// get reads keys and returns key=value pairs, in the order of keys.
func get(t *testing.T, p *state.Partition, notBefore int64, keys ...string) []string {
	t.Helper()
	ks := make([][]byte, len(keys))
	for i, k := range keys {
		ks[i] = []byte(k)
	}
	es, err := p.Get(ks, notBefore, nil)
	if err != nil {
		t.Fatalf("Get = %v", err)
	}
	out := []string{}
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s=%s@%d", e.Key, e.Value, e.Written))
	}
	return out
}

func checkpoint(t *testing.T, p *state.Partition) state.Checkpoint {
	t.Helper()
	cp, err := p.Checkpoint()
	if err != nil {
		t.Fatalf("Checkpoint = %v", err)
	}
	return cp
}

// files lists what is under dir, relative to it.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOpenApplyCloseReopen(t *testing.T) {
	dir := t.TempDir()
	p, cp := open(t, dir, state.Options{})
	if cp != (state.Checkpoint{}) {
		t.Fatalf("Open of a new file: checkpoint %+v; want zero", cp)
	}
	if err := p.Apply([]state.Entry{set("a", `{"n":1}`, 10), set("", `"empty key"`, 11), set("b", `[1,2]`, 12)}, 3); err != nil {
		t.Fatal(err)
	}
	if err := p.Apply([]state.Entry{set("a", `{"n":22}`, 20), del("b"), del("never")}, 6); err != nil {
		t.Fatal(err)
	}
	want := state.Checkpoint{Position: 6, Keys: 2, Bytes: int64(len(`a{"n":22}`) + len(`"empty key"`))}
	if got := checkpoint(t, p); got != want {
		t.Fatalf("Checkpoint() = %+v; want %+v", got, want)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("a second Close = %v; want nil", err)
	}
	if got, want := files(t, dir), []string{topic, filepath.Join(topic, "3.db")}; !slices.Equal(got, want) {
		t.Fatalf("files after Close = %v; want %v", got, want)
	}
	if _, err := p.Get([][]byte{[]byte("a")}, 0, nil); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Get after Close = %v; want ErrClosed", err)
	}

	p, cp = open(t, dir, state.Options{BootID: "another boot"}) // closed cleanly: trusted in any boot
	if cp != want {
		t.Fatalf("Open after a clean close: %+v; want %+v", cp, want)
	}
	if got, want := get(t, p, 0, "a", "b", "", "never"), []string{`a={"n":22}@20`, `="empty key"@11`}; !slices.Equal(got, want) {
		t.Fatalf("Get = %v; want %v", got, want)
	}
}

func TestTTLIndex(t *testing.T) {
	p, _ := open(t, t.TempDir(), state.Options{})
	indexTTL(t, p, true, 0) // before any write: Apply keeps it from the start
	if err := p.Apply([]state.Entry{set("old", "1", 1000), set("older", "2", 500), set("new", "3", 5000), set("moved", "4", 100)}, 4); err != nil {
		t.Fatal(err)
	}
	// A key written again leaves its old place in the index.
	if err := p.Apply([]state.Entry{set("moved", "5", 6000), del("older")}, 6); err != nil {
		t.Fatal(err)
	}
	if got, want := get(t, p, 2000, "old", "new", "moved"), []string{"new=3@5000", "moved=5@6000"}; !slices.Equal(got, want) {
		t.Fatalf("Get(notBefore 2000) = %v; want %v (an expired state is never read)", got, want)
	}
	for _, c := range []struct {
		before int64
		max    int
		skip   string
		want   []string
	}{
		{before: 2000, max: 10, want: []string{"old"}},
		{before: 5001, max: 10, want: []string{"old", "new"}},
		{before: 7000, max: 2, want: []string{"old", "new"}},
		{before: 7000, max: 10, skip: "new", want: []string{"old", "moved"}},
		{before: 1000, max: 10, want: nil},
	} {
		ks, err := p.Expired(c.before, c.max, func(k []byte) bool { return string(k) == c.skip })
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range ks {
			got = append(got, string(k))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Expired(%d, %d, skip %q) = %v; want %v", c.before, c.max, c.skip, got, c.want)
		}
	}
}

func TestSizeLimits(t *testing.T) {
	p, _ := open(t, t.TempDir(), state.Options{MaxValueBytes: 10})
	if err := p.Apply([]state.Entry{set("k", "0123456789", 1)}, 1); err != nil {
		t.Fatalf("Apply of a state at the limit = %v", err)
	}
	err := p.Apply([]state.Entry{set("fits", "1", 2), set("u-7", "0123456789A", 2)}, 2)
	if !errors.Is(err, state.ErrTooLarge) || !strings.Contains(err.Error(), `key "u-7"`) || !strings.Contains(err.Error(), "11 bytes, over 10") || !strings.Contains(err.Error(), "raise max-bytes") {
		t.Fatalf("Apply of an 11-byte state = %v; want ErrTooLarge naming the key, both sizes and the fix", err)
	}
	long := strings.Repeat("k", state.MaxKeyBytes+1)
	if err := p.Apply([]state.Entry{set(long, "1", 2)}, 2); !errors.Is(err, state.ErrTooLarge) || !strings.Contains(err.Error(), "keep keys shorter") {
		t.Fatalf("Apply of a %d-byte key = %v; want ErrTooLarge", len(long), err)
	}
	if err := p.Apply([]state.Entry{set(long[1:], "1", 2)}, 2); err != nil {
		t.Fatalf("Apply of a key of MaxKeyBytes = %v", err)
	}
	if got, want := get(t, p, 0, "fits", "k"), []string{"k=0123456789@1"}; !slices.Equal(got, want) || checkpoint(t, p).Keys != 2 {
		t.Fatalf("after the refusals Get = %v, %+v; want %v and 2 keys (nothing of a refused batch applied)", got, checkpoint(t, p), want)
	}
}

func TestUncleanFileOfAnotherBoot(t *testing.T) {
	dir := t.TempDir()
	p, _ := open(t, dir, state.Options{BootID: "boot-1"})
	if err := p.Apply([]state.Entry{set("a", "1", 1)}, 1); err != nil {
		t.Fatal(err)
	}
	if err := p.Abandon(); err != nil {
		t.Fatal(err)
	}
	// The same boot: the page cache kept what the process wrote.
	p, cp := open(t, dir, state.Options{BootID: "boot-1"})
	if cp.Discarded || cp.Position != 1 || cp.Keys != 1 {
		t.Fatalf("Open in the same boot after a crash: %+v; want position 1, 1 key, kept", cp)
	}
	if err := p.Abandon(); err != nil {
		t.Fatal(err)
	}
	p, cp = open(t, dir, state.Options{BootID: "boot-2"})
	if !cp.Discarded || cp.Position != 0 || cp.Keys != 0 {
		t.Fatalf("Open in another boot of a file left unclean: %+v; want it discarded, empty", cp)
	}
	if got := get(t, p, 0, "a"); len(got) != 0 {
		t.Fatalf("Get after the discard = %v; want nothing", got)
	}
}

func TestForeignFileRefused(t *testing.T) {
	dir := t.TempDir()
	path := state.Path(dir, topic, 3)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte("not a bbolt file "), 1000)
	if err := os.WriteFile(path, junk, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := state.Open(dir, topic, 3, state.Options{})
	if !errors.Is(err, state.ErrForeign) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("Open of a junk file = %v; want ErrForeign naming %s and the fix", err, path)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, junk) {
		t.Fatal("Open changed the foreign file")
	}

	// A bbolt file of another program: valid, without the store's buckets.
	other := state.Path(dir, topic, 4)
	db, err := bbolt.Open(other, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("theirs")); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, _, err := state.Open(dir, topic, 4, state.Options{}); !errors.Is(err, state.ErrForeign) || !strings.Contains(err.Error(), other) {
		t.Fatalf("Open of another program's bbolt file = %v; want ErrForeign naming it", err)
	}
}

func TestLockedFile(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, state.Options{})
	_, _, err := state.Open(dir, topic, 3, state.Options{LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, state.ErrLocked) || !strings.Contains(err.Error(), state.Path(dir, topic, 3)) || !strings.Contains(err.Error(), "FLOW_STATE_DIR") {
		t.Fatalf("a second Open of a held file = %v; want ErrLocked naming the file and the variable", err)
	}
}

func TestRemoveLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	p, _ := open(t, dir, state.Options{})
	if err := p.Apply([]state.Entry{set("a", "1", 1)}, 1); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(); err != nil {
		t.Fatalf("a second Remove = %v; want nil", err)
	}
	if got := files(t, dir); len(got) != 0 {
		t.Fatalf("files after Remove = %v; want none", got)
	}
	if err := p.Apply(nil, 2); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Apply after Remove = %v; want ErrClosed", err)
	}
}

func TestResetEmpties(t *testing.T) {
	p, _ := open(t, t.TempDir(), state.Options{})
	if err := p.Apply([]state.Entry{set("a", "1", 1), set("b", "2", 1)}, 9); err != nil {
		t.Fatal(err)
	}
	id := [16]byte{1, 2, 3}
	if err := p.Reset(id); err != nil {
		t.Fatal(err)
	}
	if got, want := checkpoint(t, p), (state.Checkpoint{TopicID: id}); got != want {
		t.Fatalf("Checkpoint after Reset = %+v; want %+v", got, want)
	}
	if got := get(t, p, 0, "a", "b"); len(got) != 0 {
		t.Fatalf("Get after Reset = %v; want nothing", got)
	}
}

// TestConcurrentUse reads while writing, indexing and resetting: bbolt's readers, one
// writer, and the swap of the file under Reset (run with -race).
func TestConcurrentUse(t *testing.T) {
	p, _ := open(t, t.TempDir(), state.Options{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				switch g {
				case 0:
					if err := p.Apply([]state.Entry{set(fmt.Sprint(i%7), fmt.Sprint(i), int64(i))}, int64(i)); err != nil {
						t.Error(err)
					}
				case 1:
					if i%50 == 0 {
						if err := p.Reset([16]byte{byte(i)}); err != nil {
							t.Error(err)
						}
					}
				case 2:
					if _, _, err := p.IndexTTL(); err != nil {
						t.Error(err)
					}
					fallthrough
				default:
					if _, err := p.Get([][]byte{[]byte("1"), []byte("2")}, 0, nil); err != nil {
						t.Error(err)
					}
					// A Reset makes a file without an index: the next IndexTTL builds it.
					if _, err := p.Expired(100, 3, nil); err != nil && !errors.Is(err, state.ErrNoTTLIndex) {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
}
