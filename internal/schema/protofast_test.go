package schema

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// fastProto compiles testdata/fast/all.proto, a message of every kind of field.
func fastProto(t testing.TB) *protoCodec {
	t.Helper()
	text, err := os.ReadFile("testdata/fast/all.proto")
	if err != nil {
		t.Fatal(err)
	}
	c, err := compileProtobuf(1, string(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*protoCodec)
}

// sameAsSlow fails t unless decode (the fast path where it applies) gives exactly what the
// protojson path gives, or both fail; it reports whether the fast path wrote it.
func sameAsSlow(t *testing.T, c *protoCodec, payload []byte) bool {
	t.Helper()
	got, err := c.decode(payload)
	want, werr := c.decodeSlow(payload)
	if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("decode(%x) = %s, %v; the protojson path gives %s, %v", payload, got, err, want, werr)
	}
	md, rest := c.first, payload
	if len(payload) > 0 && payload[0] == 0 {
		rest = payload[1:]
	} else {
		indexes, r, err := header.DecodeIndex(payload, maxIndexes)
		if err != nil {
			return false
		}
		if md, err = c.message(indexes); err != nil {
			return false
		}
		rest = r
	}
	_, fast := protoFast(c.plans[md.FullName()], rest)
	return fast
}

// indexed is msg's wire bytes after the message indexes.
func indexed(t testing.TB, indexes []int, msg proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	hdr, _ := header.AppendEncode(nil, 1, indexes)
	return append(hdr[5:], b...)
}

// randMessage fills a message of md with random values, edge cases often.
func randMessage(r *rand.Rand, md protoreflect.MessageDescriptor, depth int) protoreflect.Message {
	return randFill(r, md, depth, false)
}

// randFill is randMessage; tame leaves out what the fast path hands to protojson (the
// well-known types but Timestamp and Duration, NullValue, out of range times).
func randFill(r *rand.Rand, md protoreflect.MessageDescriptor, depth int, tame bool) protoreflect.Message {
	m := dynamicpb.NewMessage(md)
	switch md.FullName() {
	case "google.protobuf.Timestamp", "google.protobuf.Duration":
		fds := md.Fields()
		secs := r.Int64N(1<<34) - 1<<33
		if r.IntN(8) == 0 && !tame {
			secs = int64(r.Uint64())
		}
		nanos := int32(r.IntN(1e9))
		switch r.IntN(4) {
		case 0:
			nanos = 0
		case 1:
			nanos = nanos / 1e6 * 1e6
		case 2:
			if !tame {
				nanos = -nanos
			}
		}
		if tame && md.Name() == "Duration" && (secs < 0) != (nanos < 0) {
			nanos = -nanos
		}
		if r.IntN(3) != 0 {
			m.Set(fds.ByNumber(1), protoreflect.ValueOfInt64(secs))
		}
		if r.IntN(3) != 0 {
			m.Set(fds.ByNumber(2), protoreflect.ValueOfInt32(nanos))
		}
		return m
	}
	if depth > 3 {
		return m
	}
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if r.IntN(3) == 0 || tame && wild(fd) {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range r.IntN(4) {
				l.Append(randValue(r, fd, depth, tame))
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range r.IntN(4) {
				mp.Set(randValue(r, fd.MapKey(), depth, tame).MapKey(), randValue(r, fd.MapValue(), depth, tame))
			}
		default:
			m.Set(fd, randValue(r, fd, depth, tame))
		}
	}
	return m
}

// wild says whether fd holds what the fast path leaves to protojson.
func wild(fd protoreflect.FieldDescriptor) bool {
	if fd.IsMap() {
		fd = fd.MapValue()
	}
	switch {
	case fd.Kind() == protoreflect.EnumKind:
		return fd.Enum().FullName() == "google.protobuf.NullValue"
	case fd.Kind() == protoreflect.MessageKind:
		n := fd.Message().FullName()
		return fd.Message().ParentFile().Package() == "google.protobuf" && n != "google.protobuf.Timestamp" && n != "google.protobuf.Duration"
	}
	return false
}

var randStrings = []string{"", "a", "héllo", "\x00\x1f\"\\/<>&\u2028\t\n\r\b\f", "日本語", "😀x", "\x7f"}

func randValue(r *rand.Rand, fd protoreflect.FieldDescriptor, depth int, tame bool) protoreflect.Value {
	u := r.Uint64()
	switch r.IntN(5) {
	case 0:
		u = 0
	case 1:
		u = math.MaxUint64
	case 2:
		u = uint64(r.IntN(300))
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(u&1 == 1)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(u))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(u))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(u))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(u)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		floats := []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), 1e-7, 1e21, 1.5, -3.25e-300, math.MaxFloat64, 1e20, 123456789.125}
		x := floats[r.IntN(len(floats))]
		if r.IntN(2) == 0 {
			x = math.Float64frombits(u)
		}
		if fd.Kind() == protoreflect.FloatKind {
			return protoreflect.ValueOfFloat32(float32(x))
		}
		return protoreflect.ValueOfFloat64(x)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(randStrings[r.IntN(len(randStrings))])
	case protoreflect.BytesKind:
		b := binary.LittleEndian.AppendUint64(nil, u)
		return protoreflect.ValueOfBytes(b[:r.IntN(9)])
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		if r.IntN(4) == 0 {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(int32(u)))
		}
		return protoreflect.ValueOfEnum(vs.Get(r.IntN(vs.Len())).Number())
	}
	return protoreflect.ValueOfMessage(randFill(r, fd.Message(), depth+1, tame))
}

// fastCase is the payload data makes: data[0] picks a random message of All or of its Inner
// (tame with bit 2), two concatenated (merged on decoding), one with bytes changed and cut,
// or the rest of data itself; the next 16 bytes seed the values.
func fastCase(t testing.TB, c *protoCodec, data []byte) []byte {
	if len(data) == 0 {
		return data
	}
	var seed [16]byte
	copy(seed[:], data[1:])
	r := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
	all, tame := c.first, data[0]&4 != 0
	pick := func() []byte {
		if r.IntN(4) == 0 {
			return indexed(t, []int{0, 0}, randFill(r, all.Messages().Get(0), 1, tame).Interface())
		}
		return indexed(t, []int{0}, randFill(r, all, 0, tame).Interface())
	}
	switch data[0] % 4 {
	case 0:
		return pick()
	case 1:
		b, err := proto.Marshal(randFill(r, all, 0, tame).Interface())
		if err != nil {
			t.Fatal(err)
		}
		return append(pick(), b...)
	case 2:
		b := pick()
		for range 1 + r.IntN(3) {
			if len(b) > 1 {
				b[1+r.IntN(len(b)-1)] = byte(r.Uint32())
			}
		}
		return b[:1+r.IntN(len(b))]
	}
	return data[1:]
}

// TestProtobufFast: the fast path writes what protojson writes, and takes every whole
// message of what it covers.
func TestProtobufFast(t *testing.T) {
	c := fastProto(t)
	for i := range 2000 {
		data := binary.LittleEndian.AppendUint64([]byte{byte(i % 8)}, uint64(i))
		wrote := sameAsSlow(t, c, fastCase(t, c, data))
		if i%8 == 4 && !wrote {
			t.Errorf("case %d, a whole message of only what the fast path covers, took the protojson path", i)
		}
	}
}

// TestProtobufFastShop: the testdata's messages, by their indexes, take the fast path and
// write what protojson writes.
func TestProtobufFastShop(t *testing.T) {
	order, err := os.ReadFile("testdata/shop/order.proto")
	if err != nil {
		t.Fatal(err)
	}
	common, err := os.ReadFile("testdata/shop/common.proto")
	if err != nil {
		t.Fatal(err)
	}
	cd, err := compileProtobuf(1, string(order), []ref{{name: "shop/common.proto", text: string(common)}})
	if err != nil {
		t.Fatal(err)
	}
	c := cd.(*protoCodec)
	for _, tc := range []struct{ record, json string }{
		{"", `{"orderId":"7","total":{"currency":"EUR","units":"12"},"lines":[{"sku":"a-1","qty":2},{}],
			"state":"STATE_PAID","at":"2023-11-14T22:13:20.123Z","blob":"/wBh","counts":{"b":3,"a":0,"":-1}}`},
		{"", `{}`},
		{"", `{"orderId":"-9223372036854775808","state":7,"at":"0001-01-01T00:00:00Z","total":{}}`},
		{"", `{"at":"9999-12-31T23:59:59.999999999Z","lines":[{"sku":"\u0000\"\\\u00e9\ud83d\ude00"}]}`},
		{"shop.Refund", `{"orderId":"1","reason":{"text":"late"}}`},
		{"shop.Refund.Reason", `{"text":"late"}`},
	} {
		enc, err := c.encode(nil, 1, tc.record, []byte(tc.json))
		if err != nil {
			t.Fatalf("encode %s: %v", tc.json, err)
		}
		if !sameAsSlow(t, c, enc[5:]) {
			t.Errorf("%s %s took the protojson path", tc.record, tc.json)
		}
	}
}

func FuzzProtobufFast(f *testing.F) {
	c := fastProto(f)
	for i := range 8 {
		f.Add(binary.LittleEndian.AppendUint64([]byte{byte(i)}, uint64(i)*7919))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameAsSlow(t, c, fastCase(t, c, data))
	})
}
