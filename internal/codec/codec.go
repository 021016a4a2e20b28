// Package codec is the gRPC codec of the Run stream: the messages of ankka.flow.v1 are encoded
// by their vtprotobuf-generated methods (SizeVT, MarshalToSizedBufferVT: no reflection) and
// decoded by this package's own decoder (see [streamCodec.Unmarshal]); any other message is left to
// the protobuf runtime, as gRPC's own codec does. The bytes on the wire are the same; it is
// still the "proto" content subtype. The bridge and the sidecar both use it; it is no API,
// since the wire is the spec's protobuf, which any gRPC codec reads and writes.
package codec

import (
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
)

// vtMessage is a message with vtprotobuf's generated methods.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
}

// streamCodec encodes with vtprotobuf's methods when a message has them.
type streamCodec struct{}

var _ encoding.CodecV2 = streamCodec{}

// CallOption makes a client stream use streamCodec.
func CallOption() grpc.CallOption { return grpc.ForceCodecV2(streamCodec{}) }

// ServerOption makes a server use streamCodec.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(streamCodec{}) }

// Name is gRPC's name of the protobuf codec: the content subtype does not change.
func (streamCodec) Name() string { return "proto" }

// Marshal encodes v into one buffer of Pool, which gRPC's transport returns to it once the
// message is written.
func (streamCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return encoding.GetCodecV2("proto").Marshal(v)
	}
	size := m.SizeVT()
	buf := Pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT(*buf); err != nil {
		Pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, Pool)}, nil
}

// Unmarshal decodes data into v, accepting and refusing exactly what the protobuf runtime
// does. The hot messages of the Run stream, a Batch and an Emit or Ack written as the runtime
// writes them (every field known and of its wire type, every string UTF-8), are decoded by
// hand with the runtime's own wire parser (protowire), in a few allocations; anything else is
// left to the runtime, which decides. Bytes fields are copied out of data, except an Emit's
// from a frame of its own (ownFrame): those are slices of it.
//
// Decoding an Emit into a FromProcess that holds one already reuses its Emit, Record and
// Header messages: a caller that decodes into the same message again must keep only their
// fields' values (strings, byte slices), never the messages.
func (streamCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch v.(type) {
	case *flowv1.ToProcess, *flowv1.FromProcess:
	default:
		return encoding.GetCodecV2("proto").Unmarshal(data, v)
	}
	var b []byte
	own := false
	if len(data) == 1 { // one frame: decoded in place (bytes fields are copied out, or kept: own)
		b = data[0].ReadOnlyData()
		own = ownFrame(data[0])
	} else {
		buf := data.MaterializeToBuffer(Pool)
		defer buf.Free()
		b = buf.ReadOnlyData()
	}
	switch v := v.(type) {
	case *flowv1.ToProcess:
		v.Reset()
		if decodeBatch(b, v) {
			return nil
		}
	case *flowv1.FromProcess:
		if decodeFromProcess(b, v, own) {
			return nil
		}
	}
	return proto.Unmarshal(b, v.(proto.Message))
}

// ownFrame reports whether buf holds one message alone in memory no one reuses, so that the
// values decoded from it may stay slices of it instead of copies (one allocation and one copy
// an Emit less): gRPC reads an HTTP/2 DATA frame of 1 KiB or less, every Emit of a few hundred
// bytes, into a new slice of its own (readDataFrame) and hands it to the codec as a
// SliceBuffer, whose Free does nothing (encoding.CodecV2: the codec may keep what it takes a
// reference to; a SliceBuffer's reference is the slice). A buffer from a pool (larger frames)
// is handed back for reuse after Unmarshal, so its values are copied. Nothing may follow the
// message in its slice: a peer that packs several messages into one frame would otherwise
// have a held value keep the others' bytes too (at most the frame, 16 KiB, before the
// message; grpc-go writes one frame a message).
func ownFrame(buf mem.Buffer) bool {
	sb, ok := buf.(mem.SliceBuffer)
	return ok && cap(sb) == len(sb)
}

// known reports whether m (nil is fine) holds no unknown field.
func known(m proto.Message) bool {
	return m == nil || !m.ProtoReflect().IsValid() || len(m.ProtoReflect().GetUnknown()) == 0
}

// decodeBatch decodes a ToProcess that is one plain Batch (every field known and of its wire
// type, every string UTF-8) into tp, its records and their keys and values in a few
// allocations for the whole batch instead of three or four a record. It returns false, tp
// then undefined, for anything else.
func decodeBatch(data []byte, tp *flowv1.ToProcess) bool {
	num, typ, n := protowire.ConsumeTag(data)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return false
	}
	body, m := protowire.ConsumeBytes(data[n:])
	if m < 0 || n+m != len(data) {
		return false
	}
	b := &flowv1.Batch{}
	count := 0
	for rest := body; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return false
		}
		rest = rest[n:]
		switch {
		case typ == protowire.VarintType && (num == 1 || num == 3):
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return false
			}
			if num == 1 {
				b.BatchId = v
			} else {
				b.Partition = int32(v)
			}
			rest = rest[n:]
		case typ == protowire.BytesType && (num == 2 || num == 4):
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return false
			}
			if num == 2 {
				if !utf8.Valid(v) {
					return false
				}
				b.Inlet = string(v)
			} else {
				count++
			}
			rest = rest[n:]
		default:
			return false
		}
	}
	if count > 0 {
		ins := make([]flowv1.InputRecord, count)
		recs := make([]flowv1.Record, count)
		values := make([]byte, 0, len(body)) // every key and value fits: they are shorter than the batch
		b.Records = make([]*flowv1.InputRecord, count)
		i := 0
		for rest := body; len(rest) > 0; {
			num, typ, n := protowire.ConsumeTag(rest) // the first pass checked every field
			rest = rest[n:]
			n = protowire.ConsumeFieldValue(num, typ, rest)
			field := rest[:n]
			rest = rest[n:]
			if num != 4 {
				continue
			}
			field, _ = protowire.ConsumeBytes(field)
			in := &ins[i]
			b.Records[i] = in
			var ok bool
			if values, ok = decodeInputRecord(field, in, &recs[i], values); !ok {
				return false
			}
			i++
		}
	}
	tp.Message = &flowv1.ToProcess_Batch{Batch: b}
	return true
}

// decodeInputRecord decodes one InputRecord into in, its record (if any) into rec, with its
// key and value appended to values, which it returns extended.
func decodeInputRecord(data []byte, in *flowv1.InputRecord, rec *flowv1.Record, values []byte) ([]byte, bool) {
	var ok bool
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return values, false
		}
		data = data[n:]
		switch {
		case typ == protowire.VarintType && (num == 1 || num == 2):
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return values, false
			}
			if num == 1 {
				in.Offset = int64(v)
			} else {
				in.TimestampMs = int64(v)
			}
			data = data[n:]
		case typ == protowire.BytesType && num == 3:
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return values, false
			}
			if in.Record == nil {
				in.Record = rec
			}
			if values, ok = decodeRecord(v, rec, values, false); !ok {
				return values, false
			}
			data = data[n:]
		default:
			return values, false
		}
	}
	return values, true
}

// bytesField consumes one length-delimited field of number 1 to max from data: every field of
// Record and Header is one. ok is false for any other field or a truncated one.
func bytesField(data []byte, max protowire.Number) (num protowire.Number, v, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(data)
	if n < 0 || typ != protowire.BytesType || num < 1 || num > max {
		return 0, nil, nil, false
	}
	v, m := protowire.ConsumeBytes(data[n:])
	if m < 0 {
		return 0, nil, nil, false
	}
	return num, v, data[n+m:], true
}

// bytesOf returns v as a field's value: a slice of v itself when the frame is kept (values
// nil), else a copy appended to *values.
func bytesOf(v []byte, values *[]byte) []byte {
	if *values == nil {
		return v[:len(v):len(v)]
	}
	*values = append(*values, v...)
	return (*values)[len(*values)-len(v) : len(*values) : len(*values)]
}

// decodeRecord merges one encoded Record into rec (a message field seen twice merges, as
// the runtime does), its key and value appended to values, which it returns extended (or,
// with values nil, slices of data: the frame is kept). With reuse, the Header messages beyond
// rec.Headers' length (up to its capacity) are decoded into again, keeping their key's string
// when the name is the same.
func decodeRecord(data []byte, rec *flowv1.Record, values []byte, reuse bool) ([]byte, bool) {
	for len(data) > 0 {
		num, v, rest, ok := bytesField(data, 3)
		if !ok {
			return values, false
		}
		data = rest
		switch num {
		case 1, 3: // key (present even when empty: v is a slice of data, never nil), value
			b := bytesOf(v, &values)
			if num == 1 {
				rec.Key = b
			} else {
				rec.Value = b
			}
		case 2:
			var h *flowv1.Header
			if n := len(rec.Headers); reuse && n < cap(rec.Headers) {
				h = rec.Headers[:n+1][n]
			}
			key := ""
			if h == nil {
				h = &flowv1.Header{}
			} else {
				key = h.Key
				h.Reset()
			}
			var ok bool
			if values, ok = decodeHeader(v, h, key, values); !ok {
				return values, false
			}
			rec.Headers = append(rec.Headers, h)
		}
	}
	return values, true
}

// decodeHeader decodes one encoded Header into h, its value appended to values (or a slice
// of data, values nil: bytesOf); a key equal to prev is prev's string.
func decodeHeader(data []byte, h *flowv1.Header, prev string, values []byte) ([]byte, bool) {
	for len(data) > 0 {
		num, v, rest, ok := bytesField(data, 2)
		if !ok {
			return values, false
		}
		data = rest
		if num == 1 {
			if !utf8.Valid(v) {
				return values, false
			}
			if string(v) == prev {
				h.Key = prev
			} else {
				h.Key = string(v)
			}
			continue
		}
		h.Value = bytesOf(v, &values)
	}
	return values, true
}

// decodeFromProcess decodes a FromProcess that is one plain Emit or Ack into m, reusing the
// Emit, Record and Header messages m holds; with keep, the record's bytes are slices of data
// (ownFrame), else copies. It returns false, m then undefined, for anything else.
func decodeFromProcess(data []byte, m *flowv1.FromProcess, keep bool) bool {
	num, typ, n := protowire.ConsumeTag(data)
	if n < 0 || typ != protowire.BytesType || (num != 1 && num != 2) {
		return false
	}
	body, l := protowire.ConsumeBytes(data[n:])
	if l < 0 || n+l != len(data) {
		return false
	}
	if num == 2 {
		ack := &flowv1.Ack{}
		for len(body) > 0 {
			num, typ, n := protowire.ConsumeTag(body)
			if n < 0 || num != 1 || typ != protowire.VarintType {
				return false
			}
			v, l := protowire.ConsumeVarint(body[n:])
			if l < 0 {
				return false
			}
			ack.BatchId, body = v, body[n+l:]
		}
		m.Reset()
		m.Message = &flowv1.FromProcess_Ack{Ack: ack}
		return true
	}
	// Reuse what m holds, and its outlet's string when the name is the same.
	oneof, _ := m.Message.(*flowv1.FromProcess_Emit)
	var e *flowv1.Emit
	var rec *flowv1.Record
	outlet := ""
	if oneof != nil && oneof.Emit != nil {
		e, rec, outlet = oneof.Emit, oneof.Emit.Record, oneof.Emit.Outlet
	}
	m.Reset()
	if oneof == nil {
		oneof = &flowv1.FromProcess_Emit{}
	}
	if e == nil {
		e = &flowv1.Emit{}
	}
	e.Reset()
	m.Message, oneof.Emit = oneof, e
	var values []byte // the record's key, value and header values, in one allocation (unless kept)
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 {
			return false
		}
		body = body[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(body)
			if l < 0 {
				return false
			}
			e.BatchId, body = v, body[l:]
		case (num == 2 || num == 3) && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(body)
			if l < 0 {
				return false
			}
			body = body[l:]
			if num == 2 {
				if !utf8.Valid(v) {
					return false
				}
				if string(v) != outlet {
					outlet = string(v)
				}
				e.Outlet = outlet
				continue
			}
			if e.Record == nil {
				if rec == nil {
					rec = &flowv1.Record{}
				}
				headers := rec.Headers
				rec.Reset()
				rec.Headers = headers[:0] // decoded into again (decodeRecord)
				e.Record = rec
			}
			if values == nil && !keep {
				values = make([]byte, 0, len(v))
			}
			var ok bool
			if values, ok = decodeRecord(v, e.Record, values, true); !ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}
