package codec

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
)

// stateCodec is the gRPC codec of the State stream (millrace.state.v1), whose every batch
// brings one BatchState to the bridge and one Staged to the sidecar, an entry a key: those two
// are decoded by hand (decodeEntries), their entries in one slab and their keys and values
// slices of one copy of the message, in four allocations a message instead of three an entry.
// Anything else, and a BatchState or a Staged of another shape, is left to the protobuf
// runtime, which decides; encoding is the runtime's. The bytes on the wire are the same.
type stateCodec struct{}

var _ encoding.CodecV2 = stateCodec{}

// StateCallOption makes a client's State stream use the State codec.
func StateCallOption() grpc.CallOption { return grpc.ForceCodecV2(stateCodec{}) }

// StateServerOption makes a server of the State service use the State codec.
func StateServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(stateCodec{}) }

// Name is gRPC's name of the protobuf codec: the content subtype does not change.
func (stateCodec) Name() string { return "proto" }

func (stateCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

// Unmarshal decodes data into v, accepting and refusing exactly what the protobuf runtime
// does. The keys and values of a BatchState's or a Staged's entries are slices of a copy of
// data the message alone holds: a caller may keep them.
func (stateCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch v := v.(type) {
	case *statev1.SidecarMessage:
		b := data.Materialize()
		if id, es, more, ok := decodeEntries(b, 3); ok {
			v.Reset()
			v.Message = &statev1.SidecarMessage_BatchState{BatchState: &statev1.BatchState{BatchId: id, Entries: es, More: more}}
			return nil
		}
		return proto.Unmarshal(b, v)
	case *statev1.ProcessMessage:
		b := data.Materialize()
		if id, es, more, ok := decodeEntries(b, 2); ok {
			v.Reset()
			v.Message = &statev1.ProcessMessage_Staged{Staged: &statev1.Staged{BatchId: id, Entries: es, More: more}}
			return nil
		}
		return proto.Unmarshal(b, v)
	}
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

// decodeEntries decodes a message that is field field alone, a BatchState or a Staged (batch
// id 1, entries 2, more 3: the two share their fields), every field known and of its wire
// type. It returns false for anything else.
func decodeEntries(data []byte, field protowire.Number) (id uint64, es []*statev1.Entry, more, ok bool) {
	num, typ, n := protowire.ConsumeTag(data)
	if n < 0 || num != field || typ != protowire.BytesType {
		return 0, nil, false, false
	}
	body, m := protowire.ConsumeBytes(data[n:])
	if m < 0 || n+m != len(data) {
		return 0, nil, false, false
	}
	count := 0
	for rest := body; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return 0, nil, false, false
		}
		rest = rest[n:]
		switch {
		case typ == protowire.VarintType && (num == 1 || num == 3):
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return 0, nil, false, false
			}
			if num == 1 {
				id = v
			} else {
				more = protowire.DecodeBool(v)
			}
			rest = rest[n:]
		case typ == protowire.BytesType && num == 2:
			_, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return 0, nil, false, false
			}
			count++
			rest = rest[n:]
		default:
			return 0, nil, false, false
		}
	}
	if count == 0 {
		return id, nil, more, true
	}
	slab := make([]statev1.Entry, count)
	es = make([]*statev1.Entry, count)
	i := 0
	for rest := body; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest) // the first pass checked every field
		rest = rest[n:]
		n = protowire.ConsumeFieldValue(num, typ, rest)
		f := rest[:n]
		rest = rest[n:]
		if num != 2 {
			continue
		}
		f, _ = protowire.ConsumeBytes(f)
		if !decodeEntry(f, &slab[i]) {
			return 0, nil, false, false
		}
		es[i] = &slab[i]
		i++
	}
	return id, es, more, true
}

// decodeEntry decodes one Entry (key 1, value 2, both bytes) into e, its key and value slices
// of data.
func decodeEntry(data []byte, e *statev1.Entry) bool {
	for len(data) > 0 {
		num, v, rest, ok := bytesField(data, 2)
		if !ok {
			return false
		}
		if num == 1 {
			e.Key = v[:len(v):len(v)]
		} else {
			e.Value = v[:len(v):len(v)]
		}
		data = rest
	}
	return true
}
