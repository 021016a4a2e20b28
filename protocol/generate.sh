#!/usr/bin/env bash
# Regenerates the Go code beside the .proto files (run through `go generate ./protocol/...`).
# The plugins are the Go tools pinned in go.mod; protoc comes from Debian's protobuf-compiler.
# protoc-gen-go-vtproto writes *_vtproto.pb.go: SizeVT and the MarshalVT family without
# reflection, which internal/codec encodes the Run stream's messages with (and the sidecar sizes
# records with). Only marshal+size: decoding is internal/codec's own (protowire, fuzzed against
# proto.Unmarshal), so vtproto's unmarshal would be dead code.
# The .proto files are the spec's, verbatim, so they carry no go_package: the M options set it.
# protoc-gen-go-grpc writes the Discovery and Streamlet stubs into the messages' package and has
# no option to put them elsewhere, so a program needing only the messages would link all of
# gRPC (the conformance kit and `millrace describe` need only those). The stubs are therefore generated
# into a scratch directory and internal/splitgrpc moves them into flowv1grpc: it changes their
# package clause and qualifies the message types with the flowv1 import, nothing else, so the
# files stay the generator's text. A rewrite of the generator's output was chosen over a
# hand-written stub package (it would drift from the plugin) and over a second .proto (the
# spec's files are verbatim): the plugin stays the one source of the stubs.
set -euo pipefail
cd "$(dirname "$0")"
command -v protoc >/dev/null || { echo "generate.sh: protoc not found; install Debian's protobuf-compiler (apt-get install protobuf-compiler)" >&2; exit 1; }
bin=$(mktemp -d)
stubs=$(mktemp -d)
trap 'rm -rf "$bin" "$stubs"' EXIT
GOBIN="$bin" go install google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc \
  github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto
pkg=github.com/ankka-flow/millrace/protocol/ankka/flow/v1
protos=(ankka/flow/v1/payload.proto ankka/flow/v1/discovery.proto ankka/flow/v1/streamlet.proto)
opts=()
for p in "${protos[@]}"; do
  opts+=(--go_opt="M$p=$pkg;flowv1" --go-grpc_opt="M$p=$pkg;flowv1" --go-vtproto_opt="M$p=$pkg;flowv1")
done
protoc --proto_path=. \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --plugin=protoc-gen-go-vtproto="$bin/protoc-gen-go-vtproto" \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out="$stubs" --go-grpc_opt=paths=source_relative \
  --go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+size \
  "${opts[@]}" "${protos[@]}"
go run ./internal/splitgrpc -messages ankka/flow/v1 -import "$pkg" -name flowv1 \
  -out ankka/flow/v1/flowv1grpc -pkg flowv1grpc "$stubs"/ankka/flow/v1/*_grpc.pb.go
# millrace's own callback service (docs/state.md): not the spec's, so its stubs stay beside its
# messages; only the sidecar and the bridge link it.
spkg=github.com/ankka-flow/millrace/protocol/millrace/state/v1
sp=millrace/state/v1/state.proto
protoc --proto_path=. \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out=. --go_opt=paths=source_relative --go_opt="M$sp=$spkg;statev1" \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative --go-grpc_opt="M$sp=$spkg;statev1" \
  "$sp"
