package schema

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"

	"github.com/twmb/avro"
)

// fastAvro compiles a testdata schema and plans it.
func fastAvro(t testing.TB, name string) (*avroCodec, *avNode) {
	t.Helper()
	text, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := compileAvro(string(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	ac := c.(*avroCodec)
	if ac.fast == nil {
		t.Fatalf("%s has no fast path plan", name)
	}
	return ac, ac.fast
}

// sameAsLibrary fails t unless decode (the fast path where it applies) gives what the
// library's way gives, or both fail: the same bytes, or with anyOrder the same JSON value
// and numbers (a map's entries come in the library's Go map order); it reports whether the
// fast path wrote it.
func sameAsLibrary(t *testing.T, c *avroCodec, payload []byte, anyOrder bool) bool {
	t.Helper()
	got, err := c.decode(payload)
	want, werr := c.decodeSlow(payload)
	same := bytes.Equal(got, want)
	if !same && anyOrder && err == nil && werr == nil {
		same = sameNumbers(got, want)
	}
	if (err == nil) != (werr == nil) || !same {
		t.Fatalf("decode(%x) = %s, %v; the library's way gives %s, %v", payload, got, err, want, werr)
	}
	_, fast := avroFast(c.fast, payload)
	return fast
}

// sameNumbers compares two JSON texts as values, numbers by their text.
func sameNumbers(a, b []byte) bool {
	var x, y any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

var avStrings = []string{"", "a", "héllo", "\x00\x1f\"\\/<>&\u2028\u2029\t\n\r\b\f\x7f", "日本語", "😀", "\xff\xfe"}

// avRand appends a random binary value of p; many says a map of two entries or more was
// written.
func avRand(r *rand.Rand, p *avNode, depth int, b []byte, many *bool) []byte {
	return avGen(r, p, depth, b, many, false)
}

// avGen is avRand; tame writes only what the fast path covers: no bad union's value, map keys
// unique, no one-entry map in a union.
func avGen(r *rand.Rand, p *avNode, depth int, b []byte, many *bool, tame bool) []byte {
	long := func(v int64) []byte { return binary.AppendVarint(b, v) }
	switch p.kind {
	case avBoolean:
		return append(b, byte(r.IntN(2)))
	case avInt:
		vs := []int64{0, -1, 1, math.MaxInt32, math.MinInt32, int64(int32(r.Uint32()))}
		return long(vs[r.IntN(len(vs))])
	case avLong:
		vs := []int64{0, -1, 1, math.MaxInt64, math.MinInt64, int64(r.Uint64()), 1700000000123}
		return long(vs[r.IntN(len(vs))])
	case avFloat:
		fs := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-7, 1e21, 3.25, math.MaxFloat32}
		f := fs[r.IntN(len(fs))]
		if r.IntN(2) == 0 {
			f = math.Float32frombits(r.Uint32())
		}
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	case avDouble:
		fs := []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), 1e-7, 1e21, 123456789.125, math.SmallestNonzeroFloat64}
		f := fs[r.IntN(len(fs))]
		if r.IntN(2) == 0 {
			f = math.Float64frombits(r.Uint64())
		}
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	case avString:
		s := avStrings[r.IntN(len(avStrings))]
		return append(binary.AppendVarint(b, int64(len(s))), s...)
	case avBytes:
		n := r.IntN(9)
		b = binary.AppendVarint(b, int64(n))
		for range n {
			b = append(b, byte(r.Uint32()))
		}
		return b
	case avFixed:
		for range p.size {
			b = append(b, byte(r.Uint32()))
		}
		return b
	case avEnum:
		return long(int64(r.IntN(len(p.symbols))))
	case avArray, avMap:
		blocks := r.IntN(3)
		if depth > 4 {
			blocks = 0
		}
		key := 0
		for range blocks {
			n := 1 + r.IntN(3)
			if tame && p.kind == avMap {
				n = 2
			}
			var items []byte
			for range n {
				if p.kind == avMap {
					k := []string{"a", "b", "c", "d", "é", "\u2028"}[r.IntN(6)]
					if tame {
						k = string(rune('a' + key))
						key++
					}
					items = append(binary.AppendVarint(items, int64(len(k))), k...)
				}
				items = avGen(r, p.items, depth+1, items, many, tame)
			}
			if p.kind == avMap && (n > 1 || blocks > 1) {
				*many = true
			}
			if r.IntN(2) == 0 {
				b = binary.AppendVarint(binary.AppendVarint(b, -int64(n)), int64(len(items)))
			} else {
				b = binary.AppendVarint(b, int64(n))
			}
			b = append(b, items...)
		}
		return append(b, 0)
	case avRecord:
		for _, f := range p.fields {
			b = avGen(r, f.node, depth+1, b, many, tame)
		}
		return b
	case avUnion:
		i := r.IntN(len(p.branches))
		if depth > 4 || tame && (p.bad || p.branches[i].node.bad) {
			for j, br := range p.branches {
				if br.node.kind == avNull {
					i = j
				}
			}
		}
		return avGen(r, p.branches[i].node, depth+1, long(int64(i)), many, tame)
	}
	return b
}

// avCase is the payload data makes: data[0] picks a random value of the plan, one with bytes
// changed and cut, the rest of data itself, or a value of only what the fast path covers; the next 16 bytes seed the values.
func avCase(p *avNode, data []byte) ([]byte, bool) {
	if len(data) == 0 {
		return data, false
	}
	var seed [16]byte
	copy(seed[:], data[1:])
	r := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
	var many bool
	switch data[0] % 4 {
	case 0:
		return avRand(r, p, 0, nil, &many), many
	case 1:
		b := avRand(r, p, 0, nil, &many)
		for range 1 + r.IntN(3) {
			b[r.IntN(len(b))] = byte(r.Uint32())
		}
		return b[:r.IntN(len(b)+1)], many
	case 2:
		return data[1:], true
	}
	return avGen(r, p, 0, nil, &many, true), many
}

// TestAvroFast: over random values of testdata/fast/all.avsc (every kind, the unions the
// fast path covers and, nested, those it leaves), the fast path writes what the library
// writes, and takes the values that hold only what it covers.
func TestAvroFast(t *testing.T) {
	c, p := fastAvro(t, "fast/all.avsc")
	for i := range 4000 {
		data := binary.LittleEndian.AppendUint64([]byte{byte(i % 4)}, uint64(i))
		b, many := avCase(p, data)
		if !sameAsLibrary(t, c, b, many) && i%4 == 3 {
			t.Errorf("case %d, a value of only what the fast path covers, took the library's way", i)
		}
	}
}

// TestAvroFastTestdata: the testdata's schemas take the fast path and write what the library
// writes; a union the library's writer picks a branch of by trying is left to it.
func TestAvroFastTestdata(t *testing.T) {
	c, _ := fastAvro(t, "order.avsc")
	var v any
	if err := c.s.DecodeJSON([]byte(`{"id":7,"at":1700000000123,"day":19000,"price":"\u0001\u00e2","ref":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"blob":"\u00ff\u0000a","tag":"\u0001\u0002","ship":{"zip":"00100","lines":["Main St 1","\"x\"\n"]},
		"note":{"shop.Address":{"zip":"1","lines":[]}},"state":"PAID","counts":{"apples":3}}`), &v); err != nil {
		t.Fatal(err)
	}
	b, err := c.s.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	if !sameAsLibrary(t, c, b, false) {
		t.Error("the order took the library's way")
	}
	u, _ := fastAvro(t, "user.v2.avsc")
	var many bool
	for i := range 50 {
		b := avRand(rand.New(rand.NewPCG(uint64(i), 1)), u.fast, 0, nil, &many)
		if !sameAsLibrary(t, u, b, many) {
			t.Errorf("a user.v2 value took the library's way")
		}
	}
	odd := avro.MustParse(`["null","string",{"type":"enum","name":"E","symbols":["A"]}]`)
	if p := avPlan(odd); p != nil {
		t.Errorf("a union of a string and an enum has a plan")
	}
}

func FuzzAvroFast(f *testing.F) {
	c, p := fastAvro(f, "fast/all.avsc")
	for i := range 6 {
		f.Add(binary.LittleEndian.AppendUint64([]byte{byte(i)}, uint64(i)*7919))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, many := avCase(p, data)
		sameAsLibrary(t, c, b, many)
	})
}
