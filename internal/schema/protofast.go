package schema

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// The fast path writes the proto3 JSON mapping straight from the wire bytes, with a plan made
// once per message descriptor, byte for byte what protojson writes of the message dynamicpb
// decodes. It gives up (and the record goes the protojson way, which also makes every error)
// on what it does not cover: a message of a file that is not proto3, a well-known type other
// than Timestamp and Duration (in range), the NullValue enum and closed enums, an unknown field or one of
// another wire type than its declaration's, a singular message field given twice (merged),
// two members of one oneof, a map entry that lacks or repeats its key or value or repeats a
// key of the map, invalid UTF-8, malformed bytes, nesting deeper than pbMaxDepth.

// pbMaxDepth bounds the nesting the fast path follows; deeper messages take the slow path.
const pbMaxDepth = 64

// pbMsg is the plan of one message.
type pbMsg struct {
	fields []pbField
	dense  []int16 // field index+1 by number, for numbers below len(dense)
	sparse map[protowire.Number]int
	oneofs int
	wkt    byte // 0, wktTimestamp, wktDuration
	bad    bool // the fast path does not write this message
}

const (
	wktTimestamp = 1 + iota
	wktDuration
)

// pbField is the plan of one field.
type pbField struct {
	num      protowire.Number
	name     []byte // `"jsonName":`
	kind     protoreflect.Kind
	wire     protowire.Type
	list     bool
	packable bool
	isMap    bool
	presence bool
	oneof    int // the real oneof's index, or -1
	enum     *pbEnum
	msg      *pbMsg
	key, val *pbField // a map's entry
}

// pbEnum holds an enum's names, quoted, by number.
type pbEnum struct {
	dense  [][]byte
	sparse map[int32][]byte
}

func (e *pbEnum) name(n int32) []byte {
	if n >= 0 && int(n) < len(e.dense) {
		return e.dense[n]
	}
	return e.sparse[n]
}

func (m *pbMsg) index(num protowire.Number) int {
	if int(num) < len(m.dense) {
		return int(m.dense[num]) - 1
	}
	if i, ok := m.sparse[num]; ok {
		return i
	}
	return -1
}

// pbPlans makes the plans of every message reachable from the file's.
func pbPlans(fd protoreflect.FileDescriptor) map[protoreflect.FullName]*pbMsg {
	plans := map[protoreflect.FullName]*pbMsg{}
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			pbPlan(ms.Get(i), plans)
			walk(ms.Get(i).Messages())
		}
	}
	walk(fd.Messages())
	return plans
}

func pbPlan(md protoreflect.MessageDescriptor, plans map[protoreflect.FullName]*pbMsg) *pbMsg {
	if m := plans[md.FullName()]; m != nil {
		return m
	}
	m := &pbMsg{}
	plans[md.FullName()] = m
	switch {
	case md.FullName() == "google.protobuf.Timestamp":
		m.wkt = wktTimestamp
		return m
	case md.FullName() == "google.protobuf.Duration":
		m.wkt = wktDuration
		return m
	case md.ParentFile().Package() == "google.protobuf" || md.ParentFile().Syntax() != protoreflect.Proto3:
		m.bad = true
		return m
	}
	fds := md.Fields()
	m.fields = make([]pbField, fds.Len())
	maxDense := 0
	for i := 0; i < fds.Len(); i++ {
		if n := int(fds.Get(i).Number()); n < 1024 && n >= maxDense {
			maxDense = n + 1
		}
	}
	m.dense = make([]int16, maxDense)
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		m.fields[i] = pbFieldPlan(fd, plans)
		if int(fd.Number()) < len(m.dense) {
			m.dense[fd.Number()] = int16(i + 1)
		} else {
			if m.sparse == nil {
				m.sparse = map[protowire.Number]int{}
			}
			m.sparse[fd.Number()] = i
		}
		if m.fields[i].kind == protoreflect.GroupKind {
			m.bad = true
		}
	}
	m.oneofs = md.Oneofs().Len()
	return m
}

func pbFieldPlan(fd protoreflect.FieldDescriptor, plans map[protoreflect.FullName]*pbMsg) pbField {
	f := pbField{num: fd.Number(), kind: fd.Kind(), list: fd.IsList(), isMap: fd.IsMap(), presence: fd.HasPresence(), oneof: -1}
	f.name, _ = appendJSONString(nil, fd.JSONName())
	f.name = append(f.name, ':')
	if od := fd.ContainingOneof(); od != nil {
		// A synthetic oneof (proto3 optional) has one member: it cannot conflict.
		f.presence = true
		if !od.IsSynthetic() {
			f.oneof = od.Index()
		}
	}
	switch f.kind {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		f.wire, f.packable = protowire.Fixed32Type, true
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		f.wire, f.packable = protowire.Fixed64Type, true
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		f.wire = protowire.BytesType
	case protoreflect.GroupKind:
		f.wire = protowire.StartGroupType
	default:
		f.wire, f.packable = protowire.VarintType, true
	}
	f.packable = f.packable && f.list
	switch {
	case f.isMap:
		k, v := pbFieldPlan(fd.MapKey(), plans), pbFieldPlan(fd.MapValue(), plans)
		f.key, f.val = &k, &v
	case f.kind == protoreflect.MessageKind || f.kind == protoreflect.GroupKind:
		f.msg = pbPlan(fd.Message(), plans)
	case f.kind == protoreflect.EnumKind:
		f.enum = pbEnumPlan(fd.Enum())
	}
	return f
}

func pbEnumPlan(ed protoreflect.EnumDescriptor) *pbEnum {
	e := &pbEnum{sparse: map[int32][]byte{}}
	if ed.FullName() == "google.protobuf.NullValue" || ed.IsClosed() {
		// NullValue is written null; a closed (proto2) enum keeps an unknown number among the
		// unknown fields, which protojson leaves out: both the slow path's.
		return nil
	}
	vs := ed.Values()
	for i := 0; i < vs.Len(); i++ {
		n := int32(vs.Get(i).Number())
		// ByNumber picks among aliases as protojson does.
		q, _ := appendJSONString(nil, string(vs.ByNumber(protoreflect.EnumNumber(n)).Name()))
		if n >= 0 && n < 256 {
			for len(e.dense) <= int(n) {
				e.dense = append(e.dense, nil)
			}
			e.dense[n] = q
		} else {
			e.sparse[n] = q
		}
	}
	return e
}

// pbComma is what protojson writes between members and elements: a comma, and in some
// binaries a space after it (protobuf-go makes its compact output unstable on purpose, the
// same way for every call of one binary); asked of protojson itself once.
var pbComma = sync.OnceValue(func() []byte {
	b, err := protojson.Marshal(&descriptorpb.FileDescriptorProto{Name: proto.String("a"), Package: proto.String("b")})
	if err == nil && bytes.Contains(b, []byte(", ")) {
		return []byte(", ")
	}
	return []byte(",")
})

// pbSlot is what the scan of one message found of one field: how often, where it was first
// (its tag), and its last value's bytes.
type pbSlot struct {
	n            int
	first        int
	lo, hi       int
	typ          protowire.Type
	oneofMembers int
}

// pbMapEntry is one map entry found, for sorting by key.
type pbMapEntry struct {
	str    []byte
	num    int64
	u      uint64
	vl, vh int
	vtyp   protowire.Type
}

type pbWriter struct {
	out   []byte
	slots []pbSlot
	ones  []int // the field index+1 set of each oneof
	ents  []pbMapEntry
	comma []byte
}

var pbWriters = sync.Pool{New: func() any { return &pbWriter{} }}

// protoFast writes msg's JSON, or reports false and the caller takes the protojson way.
func protoFast(m *pbMsg, b []byte) ([]byte, bool) {
	w := pbWriters.Get().(*pbWriter)
	w.out = make([]byte, 0, 2*len(b)+64)
	w.comma = pbComma()
	ok := w.message(m, b, 0)
	out := w.out
	w.out = nil
	pbWriters.Put(w)
	return out, ok
}

// pbNext reads the tag and value at b[i:]: the field number, wire type, value bounds (the
// content for bytes) and the end.
func pbNext(b []byte, i int) (num protowire.Number, typ protowire.Type, lo, hi int, ok bool) {
	num, typ, n := protowire.ConsumeTag(b[i:])
	if n < 0 {
		return 0, 0, 0, 0, false
	}
	lo = i + n
	switch typ {
	case protowire.VarintType:
		_, n = protowire.ConsumeVarint(b[lo:])
		hi = lo + n
	case protowire.Fixed32Type:
		n, hi = 4, lo+4
	case protowire.Fixed64Type:
		n, hi = 8, lo+8
	case protowire.BytesType:
		var v uint64
		v, n = protowire.ConsumeVarint(b[lo:])
		if n < 0 || v > uint64(len(b)) {
			return 0, 0, 0, 0, false
		}
		lo += n
		hi = lo + int(v)
	default:
		return 0, 0, 0, 0, false
	}
	if n < 0 || hi > len(b) {
		return 0, 0, 0, 0, false
	}
	return num, typ, lo, hi, true
}

func (w *pbWriter) message(m *pbMsg, b []byte, depth int) bool {
	if depth > pbMaxDepth || m.bad {
		return false
	}
	switch m.wkt {
	case wktTimestamp, wktDuration:
		return w.wellKnown(m.wkt, b)
	}
	base, obase := len(w.slots), len(w.ones)
	w.slots = append(w.slots, make([]pbSlot, len(m.fields))...)
	w.ones = append(w.ones, make([]int, m.oneofs)...)
	defer func() { w.slots, w.ones = w.slots[:base], w.ones[:obase] }()
	slots, ones := w.slots[base:], w.ones[obase:]
	for i := 0; i < len(b); {
		num, typ, lo, hi, ok := pbNext(b, i)
		if !ok {
			return false
		}
		fi := m.index(num)
		if fi < 0 {
			return false
		}
		f := &m.fields[fi]
		if typ != f.wire && !(f.packable && typ == protowire.BytesType) {
			return false
		}
		s := &slots[fi]
		if s.n == 0 {
			s.first = i
		}
		s.n++
		s.lo, s.hi, s.typ = lo, hi, typ
		if s.n > 1 && f.kind == protoreflect.MessageKind && !f.list && !f.isMap {
			return false
		}
		if f.oneof >= 0 {
			if o := ones[f.oneof]; o != 0 && o != fi+1 {
				return false
			}
			ones[f.oneof] = fi + 1
		}
		i = hi
	}
	w.out = append(w.out, '{')
	first := true
	for fi := range m.fields {
		s := w.slots[base+fi]
		if s.n == 0 {
			continue
		}
		f := &m.fields[fi]
		mark := len(w.out)
		if !first {
			w.out = append(w.out, w.comma...)
		}
		w.out = append(w.out, f.name...)
		var wrote, ok bool
		switch {
		case f.isMap:
			wrote, ok = w.mapField(f, b, s.first, depth)
		case f.list:
			wrote, ok = w.list(f, b, s.first, depth)
		default:
			wrote, ok = w.singular(f, b[s.lo:s.hi], s.typ, !f.presence, depth)
		}
		if !ok {
			return false
		}
		if !wrote {
			w.out = w.out[:mark]
			continue
		}
		first = false
	}
	w.out = append(w.out, '}')
	return true
}

// singular writes one value of f from its raw bytes (the content for bytes, the varint or
// the fixed bytes otherwise); with omitZero a zero value is not written (wrote false).
func (w *pbWriter) singular(f *pbField, raw []byte, typ protowire.Type, omitZero bool, depth int) (wrote, ok bool) {
	var v uint64
	switch typ {
	case protowire.VarintType:
		var n int
		if v, n = protowire.ConsumeVarint(raw); n != len(raw) {
			return false, false
		}
	case protowire.Fixed32Type:
		v = uint64(binary.LittleEndian.Uint32(raw))
	case protowire.Fixed64Type:
		v = binary.LittleEndian.Uint64(raw)
	}
	out := w.out
	switch f.kind {
	case protoreflect.BoolKind:
		if v == 0 {
			if omitZero {
				return false, true
			}
			out = append(out, "false"...)
		} else {
			out = append(out, "true"...)
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n := int32(v)
		if f.kind == protoreflect.Sint32Kind {
			n = int32(protowire.DecodeZigZag(v & math.MaxUint32))
		}
		if n == 0 && omitZero {
			return false, true
		}
		out = strconv.AppendInt(out, int64(n), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if uint32(v) == 0 && omitZero {
			return false, true
		}
		out = strconv.AppendUint(out, uint64(uint32(v)), 10)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		n := int64(v)
		if f.kind == protoreflect.Sint64Kind {
			n = protowire.DecodeZigZag(v)
		}
		if n == 0 && omitZero {
			return false, true
		}
		out = append(strconv.AppendInt(append(out, '"'), n, 10), '"')
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if v == 0 && omitZero {
			return false, true
		}
		out = append(strconv.AppendUint(append(out, '"'), v, 10), '"')
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		x, bits := math.Float64frombits(v), 64
		if f.kind == protoreflect.FloatKind {
			x, bits = float64(math.Float32frombits(uint32(v))), 32
		}
		if x == 0 && !math.Signbit(x) && omitZero {
			return false, true
		}
		out = appendJSONFloat(out, x, bits)
	case protoreflect.EnumKind:
		n := int32(v)
		if n == 0 && omitZero {
			return false, true
		}
		if f.enum == nil {
			return false, false
		}
		if q := f.enum.name(n); q != nil {
			out = append(out, q...)
		} else {
			out = strconv.AppendInt(out, int64(n), 10)
		}
	case protoreflect.StringKind:
		if len(raw) == 0 && omitZero {
			return false, true
		}
		var err error
		if out, err = appendJSONString(out, string(raw)); err != nil {
			return false, false
		}
	case protoreflect.BytesKind:
		if len(raw) == 0 && omitZero {
			return false, true
		}
		out = append(base64.StdEncoding.AppendEncode(append(out, '"'), raw), '"')
	case protoreflect.MessageKind:
		return true, w.message(f.msg, raw, depth+1)
	default:
		return false, false
	}
	w.out = out
	return true, true
}

// list writes the elements of repeated field f, from its first tag at b[i:] on; an empty
// list (only empty packed runs) is not written.
func (w *pbWriter) list(f *pbField, b []byte, i, depth int) (wrote, ok bool) {
	w.out = append(w.out, '[')
	n := 0
	for i < len(b) {
		num, typ, lo, hi, _ := pbNext(b, i) // the scan checked every tag
		i = hi
		if num != f.num {
			continue
		}
		if typ == f.wire {
			if n > 0 {
				w.out = append(w.out, w.comma...)
			}
			if _, ok := w.singular(f, b[lo:hi], typ, false, depth); !ok {
				return false, false
			}
			n++
			continue
		}
		// A packed run.
		for p := lo; p < hi; {
			var e int
			switch f.wire {
			case protowire.VarintType:
				_, k := protowire.ConsumeVarint(b[p:hi])
				if k < 0 {
					return false, false
				}
				e = p + k
			case protowire.Fixed32Type:
				e = p + 4
			default:
				e = p + 8
			}
			if e > hi {
				return false, false
			}
			if n > 0 {
				w.out = append(w.out, w.comma...)
			}
			if _, ok := w.singular(f, b[p:e], f.wire, false, depth); !ok {
				return false, false
			}
			n++
			p = e
		}
	}
	w.out = append(w.out, ']')
	return n > 0, true
}
