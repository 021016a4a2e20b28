package state_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/sidecar/internal/state"
)

// indexTTL calls IndexTTL and wants it to report built and keys.
func indexTTL(t *testing.T, p *state.Partition, wantBuilt bool, wantKeys int) {
	t.Helper()
	built, keys, err := p.IndexTTL()
	if err != nil || built != wantBuilt || keys != wantKeys {
		t.Fatalf("IndexTTL() = %v, %d keys, %v; want %v, %d keys, nil", built, keys, err, wantBuilt, wantKeys)
	}
}

// ttlIndex wants the file's TTL index to hold want (key@written, in index order) and its meta
// entry ttl-index to be flag; TTLIndexed to say so ("0": not indexed).
func ttlIndex(t *testing.T, p *state.Partition, flag string, want ...string) {
	t.Helper()
	got, gotFlag, err := p.TTLIndex()
	if err != nil {
		t.Fatal(err)
	}
	if gotFlag != flag || !slices.Equal(got, want) {
		t.Fatalf("TTL index = %v, ttl-index %q; want %v, %q", got, gotFlag, want, flag)
	}
	if indexed, err := p.TTLIndexed(); err != nil || indexed != (flag != "0") {
		t.Fatalf("TTLIndexed() = %v, %v; want %v (ttl-index %q)", indexed, err, flag != "0", flag)
	}
}

// expired returns Expired(before, 100, nil) as strings.
func expired(t *testing.T, p *state.Partition, before int64) []string {
	t.Helper()
	ks, err := p.Expired(before, 100, nil)
	if err != nil {
		t.Fatalf("Expired(%d) = %v", before, err)
	}
	out := []string{}
	for _, k := range ks {
		out = append(out, string(k))
	}
	return out
}

// TestTTLIndexOnlyOnceAsked: a new file writes no TTL entries, and Expired refuses it, until
// IndexTTL builds the index from the live values; then Apply keeps it, and it stays built
// across a reopen.
func TestTTLIndexOnlyOnceAsked(t *testing.T) {
	dir := t.TempDir()
	p, _ := open(t, dir, state.Options{})
	ttlIndex(t, p, "0")
	err := p.Apply([]state.Entry{set("a", "1", 300), set("b", "2", 100), set("gone", "3", 50), set("c", "4", 200), set("", "5", 150)}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply([]state.Entry{set("c", "6", 400), del("gone"), del("never")}, 8); err != nil {
		t.Fatal(err)
	}
	ttlIndex(t, p, "0") // nothing written to it
	if _, err := p.Expired(1000, 10, nil); !errors.Is(err, state.ErrNoTTLIndex) || !strings.Contains(err.Error(), "IndexTTL") {
		t.Fatalf("Expired without an index = %v; want ErrNoTTLIndex naming IndexTTL", err)
	}
	if got, want := get(t, p, 0, "a", "b", "c", "gone", ""), []string{"a=1@300", "b=2@100", "c=6@400", "=5@150"}; !slices.Equal(got, want) {
		t.Fatalf("Get without an index = %v; want %v", got, want)
	}

	indexTTL(t, p, true, 4)
	ttlIndex(t, p, "1", "b@100", "@150", "a@300", "c@400") // the live keys at their write times
	if got, want := expired(t, p, 301), []string{"b", "", "a"}; !slices.Equal(got, want) {
		t.Fatalf("Expired(301) = %v; want %v", got, want)
	}
	indexTTL(t, p, false, 0) // built already: nothing to do

	// Kept from now on: a key written again moves, a deleted one leaves, a new one joins.
	if err := p.Apply([]state.Entry{set("b", "7", 500), del("a"), set("d", "8", 250), del("never")}, 12); err != nil {
		t.Fatal(err)
	}
	ttlIndex(t, p, "1", "@150", "d@250", "c@400", "b@500")
	if got, want := checkpoint(t, p), (state.Checkpoint{Position: 12, Keys: 4, Bytes: int64(len("5") + len("c6") + len("b7") + len("d8"))}); got != want {
		t.Fatalf("Checkpoint() = %+v; want %+v", got, want)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p, _ = open(t, dir, state.Options{})
	ttlIndex(t, p, "1", "@150", "d@250", "c@400", "b@500")
	indexTTL(t, p, false, 0)
	if got, want := expired(t, p, 401), []string{"", "d", "c"}; !slices.Equal(got, want) {
		t.Fatalf("Expired(401) after a reopen = %v; want %v", got, want)
	}
}

// TestTTLIndexOfOldFile: a file written before the index became optional (format 1, no
// ttl-index entry, every key indexed) is read as indexed, without a restore, and keeps its
// index.
func TestTTLIndexOfOldFile(t *testing.T) {
	dir := t.TempDir()
	p, _ := open(t, dir, state.Options{})
	indexTTL(t, p, true, 0)
	if err := p.Apply([]state.Entry{set("a", "1", 300), set("b", "2", 100), set("c", "3", 200)}, 3); err != nil {
		t.Fatal(err)
	}
	if err := p.ForgetTTLFlag(); err != nil {
		t.Fatal(err)
	}
	ttlIndex(t, p, "", "b@100", "c@200", "a@300")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	p, cp := open(t, dir, state.Options{})
	if want := (state.Checkpoint{Position: 3, Keys: 3, Bytes: 6}); cp != want {
		t.Fatalf("Open of an old file: checkpoint %+v; want %+v (trusted, no restore)", cp, want)
	}
	if got, want := expired(t, p, 250), []string{"b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("Expired(250) of an old file = %v; want %v", got, want)
	}
	indexTTL(t, p, false, 0)
	if err := p.Apply([]state.Entry{set("b", "4", 400), del("c")}, 5); err != nil {
		t.Fatal(err)
	}
	ttlIndex(t, p, "", "a@300", "b@400")
}

// TestResetDropsTTLIndex: a full restore makes the file again, without an index.
func TestResetDropsTTLIndex(t *testing.T) {
	p, _ := open(t, t.TempDir(), state.Options{})
	indexTTL(t, p, true, 0)
	if err := p.Apply([]state.Entry{set("a", "1", 1)}, 1); err != nil {
		t.Fatal(err)
	}
	if err := p.Reset([16]byte{7}); err != nil {
		t.Fatal(err)
	}
	ttlIndex(t, p, "0")
	if err := p.Apply([]state.Entry{set("b", "2", 2)}, 1); err != nil {
		t.Fatal(err)
	}
	ttlIndex(t, p, "0")
	indexTTL(t, p, true, 1)
	ttlIndex(t, p, "1", "b@2")
}

// TestTTLIndexClosed: IndexTTL of a closed store says so.
func TestTTLIndexClosed(t *testing.T) {
	p, _ := open(t, t.TempDir(), state.Options{})
	p.Close()
	if _, _, err := p.IndexTTL(); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("IndexTTL after Close = %v; want ErrClosed", err)
	}
}

// TestTTLIndexInChunks: a build over several transactions indexes every live key once, in
// order, and sets the flag only at its end; the entries of a build cut short (the flag still
// 0) are dropped by the next one.
func TestTTLIndexInChunks(t *testing.T) {
	defer state.SetTTLIndexChunk(2)()
	p, _ := open(t, t.TempDir(), state.Options{})
	if err := p.Apply([]state.Entry{set("a", "1", 300), set("b", "2", 100), set("c", "3", 200), set("d", "4", 50), set("e", "5", 250)}, 5); err != nil {
		t.Fatal(err)
	}
	if err := p.PutStrayTTLEntry("gone", 10); err != nil {
		t.Fatal(err)
	}
	ttlIndex(t, p, "0", "gone@10")
	indexTTL(t, p, true, 5)
	ttlIndex(t, p, "1", "d@50", "b@100", "c@200", "e@250", "a@300")
	if got, want := expired(t, p, 201), []string{"d", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("Expired(201) = %v; want %v", got, want)
	}
}
