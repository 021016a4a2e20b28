package state_test

import (
	"fmt"
	"testing"

	"github.com/ankka-flow/millrace/sidecar/internal/state"
)

// BenchmarkApply is what the sidecar's promotion costs: one Apply of a batch of 100 states
// (`{"n":…}`, about 10 bytes) into a store of 1,000 or 100,000 keys, each key written again,
// the keys of successive batches walking the store. An op is a batch. keys=N is a store
// without a TTL index (an inlet without a TTL); keys=N,ttl-index one whose index IndexTTL
// built, so each write also moves its key in the index.
//
//	go test -run '^$' -bench 'BenchmarkApply|BenchmarkGet' -benchmem ./sidecar/internal/state/
func BenchmarkApply(b *testing.B) {
	for _, keys := range []int{1000, 100_000} {
		for _, indexed := range []bool{false, true} {
			name := fmt.Sprintf("keys=%d", keys)
			if indexed {
				name += ",ttl-index"
			}
			b.Run(name, func(b *testing.B) { benchmarkApply(b, keys, indexed) })
		}
	}
}

func benchmarkApply(b *testing.B, keys int, indexed bool) {
	p := filled(b, keys)
	if indexed {
		if _, _, err := p.IndexTTL(); err != nil {
			b.Fatal(err)
		}
	}
	next, pos := 0, int64(keys)
	es := make([]state.Entry, 100)
	b.ReportAllocs()
	for b.Loop() {
		for i := range es {
			es[i] = state.Entry{Key: fmt.Appendf(nil, "k%d", next), Value: fmt.Appendf(nil, `{"n":%d}`, pos), Written: pos}
			next = (next + 1) % keys
			pos++
		}
		if err := p.Apply(es, pos); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet is what reading a batch's states costs: one Get of 100 keys from a store of
// 1,000 or 100,000 keys. An op is a batch.
func BenchmarkGet(b *testing.B) {
	for _, keys := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			p := filled(b, keys)
			ks := make([][]byte, 100)
			next := 0
			var dst []state.Entry
			b.ReportAllocs()
			for b.Loop() {
				for i := range ks {
					ks[i] = fmt.Appendf(ks[i][:0], "k%d", next)
					next = (next + 1) % keys
				}
				var err error
				if dst, err = p.Get(ks, 0, dst[:0]); err != nil || len(dst) != len(ks) {
					b.Fatalf("Get = %d entries, %v; want %d", len(dst), err, len(ks))
				}
			}
		})
	}
}

// filled is a store of keys keys k0…, each with a small state.
func filled(b *testing.B, keys int) *state.Partition {
	b.Helper()
	p, _, err := state.Open(b.TempDir(), "bench", 0, state.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	fill(b, p, keys, 1)
	return p
}

// fill writes keys keys k0… into p, each with a small state; key i written at i*stride
// modulo keys (stride 1: in the order of the keys' numbers).
func fill(b *testing.B, p *state.Partition, keys int, stride int) {
	b.Helper()
	es := make([]state.Entry, 0, 10_000)
	for k := 0; k < keys; k += cap(es) {
		es = es[:0]
		for i := k; i < min(keys, k+cap(es)); i++ {
			es = append(es, state.Entry{Key: fmt.Appendf(nil, "k%d", i), Value: []byte(`{"n":0}`), Written: int64(i * stride % keys)})
		}
		if err := p.Apply(es, int64(k+len(es))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIndexTTL is what a partition's first sweep costs before it reads: IndexTTL of a
// store of 100,000 keys without an index, their write times in no order of the keys' (key i
// written at 7919·i mod 100,000). An op is one build (the store filled again, untimed).
func BenchmarkIndexTTL(b *testing.B) {
	const keys = 100_000
	p := filled(b, keys)
	for b.Loop() {
		b.StopTimer()
		if err := p.Reset([16]byte{1}); err != nil {
			b.Fatal(err)
		}
		fill(b, p, keys, 7919)
		b.StartTimer()
		if built, n, err := p.IndexTTL(); err != nil || !built || n != keys {
			b.Fatalf("IndexTTL() = %v, %d keys, %v; want true, %d keys", built, n, err, keys)
		}
	}
}
