package bridge

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rpcError is an error a Streamlet.Run stream ends with: the gRPC code it goes out as, and its
// cause with the chain kept (errors.Is(err, engine.ErrStart) holds). It becomes a status only
// at the edge, when grpc-go asks for its GRPCStatus.
type rpcError struct {
	code codes.Code
	err  error
}

// rpcErrorf is fmt.Errorf (with %w) that the stream ends with as code.
func rpcErrorf(code codes.Code, format string, args ...any) error {
	return &rpcError{code: code, err: fmt.Errorf(format, args...)}
}

func (e *rpcError) Error() string { return e.err.Error() }

func (e *rpcError) Unwrap() error { return e.err }

// GRPCStatus is what grpc-go sends for the error: its code and message.
func (e *rpcError) GRPCStatus() *status.Status { return status.New(e.code, e.err.Error()) }
