package schema

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// mapField writes map field f's entries, from its first tag at b[i:] on, sorted by key as
// protojson sorts them.
func (w *pbWriter) mapField(f *pbField, b []byte, i, depth int) (wrote, ok bool) {
	base := len(w.ents)
	defer func() { w.ents = w.ents[:base] }()
	for i < len(b) {
		num, _, lo, hi, _ := pbNext(b, i)
		i = hi
		if num != f.num {
			continue
		}
		e, ok := pbEntry(f, b[lo:hi])
		if !ok {
			return false, false
		}
		e.vl, e.vh = e.vl+lo, e.vh+lo
		w.ents = append(w.ents, e)
	}
	ents := w.ents[base:]
	switch f.key.kind {
	case protoreflect.StringKind:
		slices.SortFunc(ents, func(x, y pbMapEntry) int { return bytes.Compare(x.str, y.str) })
	case protoreflect.BoolKind, protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		slices.SortFunc(ents, func(x, y pbMapEntry) int { return cmp.Compare(x.u, y.u) })
	default:
		slices.SortFunc(ents, func(x, y pbMapEntry) int { return cmp.Compare(x.num, y.num) })
	}
	w.out = append(w.out, '{')
	for j, e := range ents {
		if j > 0 {
			if bytes.Equal(e.str, ents[j-1].str) && e.num == ents[j-1].num && e.u == ents[j-1].u {
				return false, false // a key given twice: the last wins, in wire order
			}
			w.out = append(w.out, w.comma...)
		}
		var err error
		switch f.key.kind {
		case protoreflect.StringKind:
			w.out, err = appendJSONString(w.out, string(e.str))
		case protoreflect.BoolKind:
			w.out = append(w.out, '"')
			w.out = strconv.AppendBool(w.out, e.u != 0)
			w.out = append(w.out, '"')
		case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
			w.out = append(strconv.AppendUint(append(w.out, '"'), e.u, 10), '"')
		default:
			w.out = append(strconv.AppendInt(append(w.out, '"'), e.num, 10), '"')
		}
		if err != nil {
			return false, false
		}
		w.out = append(w.out, ':')
		if _, ok := w.singular(f.val, b[e.vl:e.vh], e.vtyp, false, depth); !ok {
			return false, false
		}
	}
	w.out = append(w.out, '}')
	return len(ents) > 0, true
}

// pbEntry reads one map entry: exactly one key and one value, of their declared wire types;
// the value's bounds are offsets into entry.
func pbEntry(f *pbField, entry []byte) (pbMapEntry, bool) {
	var e pbMapEntry
	var haveK, haveV bool
	for i := 0; i < len(entry); {
		num, typ, lo, hi, ok := pbNext(entry, i)
		if !ok {
			return e, false
		}
		i = hi
		switch {
		case num == 1 && !haveK && typ == f.key.wire:
			haveK = true
			raw := entry[lo:hi]
			switch typ {
			case protowire.BytesType:
				if !utf8.Valid(raw) {
					return e, false
				}
				e.str = raw
			case protowire.VarintType:
				v, _ := protowire.ConsumeVarint(raw)
				switch f.key.kind {
				case protoreflect.BoolKind:
					e.u = 0
					if v != 0 {
						e.u = 1
					}
				case protoreflect.Uint32Kind:
					e.u = uint64(uint32(v))
				case protoreflect.Uint64Kind:
					e.u = v
				case protoreflect.Int32Kind:
					e.num = int64(int32(v))
				case protoreflect.Sint32Kind:
					e.num = int64(int32(protowire.DecodeZigZag(v & math.MaxUint32)))
				case protoreflect.Sint64Kind:
					e.num = protowire.DecodeZigZag(v)
				default:
					e.num = int64(v)
				}
			case protowire.Fixed32Type:
				v := binary.LittleEndian.Uint32(raw)
				e.u, e.num = uint64(v), int64(int32(v))
			case protowire.Fixed64Type:
				v := binary.LittleEndian.Uint64(raw)
				e.u, e.num = v, int64(v)
			}
		case num == 2 && !haveV && typ == f.val.wire:
			haveV = true
			e.vl, e.vh, e.vtyp = lo, hi, typ
		default:
			return e, false
		}
	}
	return e, haveK && haveV
}
