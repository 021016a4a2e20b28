// Package codec is the gRPC codec of the Run stream: the messages of ankka.flow.v1 encoded and
// decoded by their vtprotobuf-generated methods (MarshalVT, UnmarshalVT: no reflection), any
// other message by the protobuf runtime, as gRPC's own codec does. The bytes on the wire are
// the same; it is still the "proto" content subtype.
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
	UnmarshalVT([]byte) error
	Reset()
}

// Codec encodes with vtprotobuf's methods when a message has them.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// CallOption makes a client stream use Codec.
func CallOption() grpc.CallOption { return grpc.ForceCodecV2(Codec{}) }

// ServerOption makes a server use Codec.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(Codec{}) }

// Name is gRPC's name of the protobuf codec: the content subtype does not change.
func (Codec) Name() string { return "proto" }

// Encoded is a message encoded already (see Encode): Marshal sends its bytes as they are.
// They must stay unchanged until the stream has written them, which may be after SendMsg
// returns.
type Encoded []byte

// Encode appends the encoding of each of msgs to one buffer and returns each message's
// encoding, for SendMsg: one allocation for a whole answer instead of one a message.
func Encode(msgs []*flowv1.FromProcess) ([]Encoded, error) {
	n := 0
	for _, m := range msgs {
		n += m.SizeVT()
	}
	buf := make([]byte, n)
	out := make([]Encoded, len(msgs))
	for i, m := range msgs {
		size := m.SizeVT()
		if _, err := m.MarshalToSizedBufferVT(buf[:size]); err != nil {
			return nil, err
		}
		out[i], buf = Encoded(buf[:size:size]), buf[size:]
	}
	return out, nil
}

// Marshal encodes v into one buffer, from gRPC's pool when it is large enough to be pooled.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*Encoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(*e)}, nil
	}
	m, ok := v.(vtMessage)
	if !ok {
		return encoding.GetCodecV2("proto").Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal resets v and decodes data into it, accepting and refusing what the protobuf
// runtime does. The two messages of the Run stream go through vtprotobuf's decoder when they
// are plain: every field known and of its wire type, every string UTF-8 (which vtprotobuf
// does not check). Anything else (a Start too, once a conversation) is left to the runtime,
// which decides. Bytes fields are copied out of data.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	var m vtMessage
	switch v := v.(type) {
	case *flowv1.ToProcess:
		m = v
	case *flowv1.FromProcess:
		m = v
	default:
		return encoding.GetCodecV2("proto").Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	m.Reset()
	if tp, ok := v.(*flowv1.ToProcess); ok && decodeBatch(buf.ReadOnlyData(), tp) && plain(v) {
		return nil
	}
	m.Reset()
	if err := m.UnmarshalVT(buf.ReadOnlyData()); err == nil && plain(v) {
		return nil
	}
	return proto.Unmarshal(buf.ReadOnlyData(), v.(proto.Message))
}

// plain reports whether a decoded Run stream message is one the runtime would decode the
// same: no Start, no unknown field anywhere, every string UTF-8.
func plain(v any) bool {
	switch v := v.(type) {
	case *flowv1.ToProcess:
		if known(v) {
			switch m := v.GetMessage().(type) {
			case *flowv1.ToProcess_Batch:
				if !known(m.Batch) || !utf8.ValidString(m.Batch.GetInlet()) {
					return false
				}
				for _, r := range m.Batch.GetRecords() {
					if !known(r) || !plainRecord(r.GetRecord()) {
						return false
					}
				}
				return true
			case *flowv1.ToProcess_Stop:
				return known(m.Stop) && utf8.ValidString(m.Stop.GetReason())
			case nil:
				return true
			}
		}
	case *flowv1.FromProcess:
		if known(v) {
			switch m := v.GetMessage().(type) {
			case *flowv1.FromProcess_Emit:
				return known(m.Emit) && utf8.ValidString(m.Emit.GetOutlet()) && plainRecord(m.Emit.GetRecord())
			case *flowv1.FromProcess_Ack:
				return known(m.Ack)
			case *flowv1.FromProcess_Fail:
				return known(m.Fail) && known(m.Fail.GetError()) && utf8.ValidString(m.Fail.GetError().GetMessage())
			case nil:
				return true
			}
		}
	}
	return false
}

// known reports whether m (nil is fine) holds no unknown field.
func known(m proto.Message) bool {
	return m == nil || !m.ProtoReflect().IsValid() || len(m.ProtoReflect().GetUnknown()) == 0
}

func plainRecord(r *flowv1.Record) bool {
	if r == nil {
		return true
	}
	if !known(r) {
		return false
	}
	for _, h := range r.GetHeaders() {
		if !known(h) || !utf8.ValidString(h.GetKey()) {
			return false
		}
	}
	return true
}

// decodeBatch decodes a ToProcess that is one Batch written as the protobuf runtime writes it
// (every field known and of its wire type) into tp, its records and their values in a few
// allocations for the whole batch instead of three a record. It returns false, tp then
// undefined, for anything else.
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
		values := make([]byte, 0, len(body)) // every value fits: each is shorter than its record
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
			if !decodeInputRecord(field, in, &recs[i], values[len(values):]) {
				return false
			}
			if in.Record != nil {
				values = values[:len(values)+len(in.Record.Value)]
			}
			i++
		}
	}
	tp.Message = &flowv1.ToProcess_Batch{Batch: b}
	return true
}

// decodeInputRecord decodes one InputRecord into in, its record (if any) into rec, with the
// value appended to values (which has room for it).
func decodeInputRecord(data []byte, in *flowv1.InputRecord, rec *flowv1.Record, values []byte) bool {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return false
		}
		data = data[n:]
		switch {
		case typ == protowire.VarintType && (num == 1 || num == 2):
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return false
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
				return false
			}
			if in.Record == nil {
				in.Record = rec
				rec.Value = values // the value is appended here, without an allocation
			}
			if err := rec.UnmarshalVT(v); err != nil {
				return false
			}
			data = data[n:]
		default:
			return false
		}
	}
	return true
}
