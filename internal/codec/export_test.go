package codec

// Codec is the stream's codec, which the package hands out only as gRPC options.
type Codec = streamCodec

// StateCodec is the State stream's codec.
type StateCodec = stateCodec
