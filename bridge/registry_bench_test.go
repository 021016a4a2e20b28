package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/internal/schema"
)

// The schemas of benchValue in each format: the same record as Avro and as Protobuf.
const (
	benchAvsc  = `{"type":"record","name":"Listing","namespace":"bench","fields":[{"name":"id","type":"int"},{"name":"name","type":"string"},{"name":"tags","type":{"type":"array","items":"string"}},{"name":"price","type":"double"},{"name":"city","type":"string"}]}`
	benchProto = `syntax = "proto3";
package bench;
message Listing {
  int32 id = 1;
  string name = 2;
  repeated string tags = 3;
  double price = 4;
  string city = 5;
}
`
)

// benchFormats are the rows: plain JSON (the pass-through), then each registry format.
var benchFormats = []struct {
	name   string
	format schema.Format
	typ    sr.SchemaType
	text   string
}{
	{"json", "", 0, ""},
	{"avro", schema.Avro, sr.TypeAvro, benchAvsc},
	{"protobuf", schema.Protobuf, sr.TypeProtobuf, benchProto},
}

// benchRegistry is an srfake registry with the benchmark's schema of format under the subjects
// of the topics "in" and "out" (the benchmark's Start binds those), the client of it, and
// benchValue in the wire format.
func benchRegistry(b *testing.B, typ sr.SchemaType, text string, format schema.Format) (*srfake.Registry, *schema.Registry, []byte) {
	b.Helper()
	fake := srfake.New()
	b.Cleanup(fake.Close)
	for _, subject := range []string{"in-value", "out-value"} {
		if _, _, err := fake.RegisterSchema(subject, sr.Schema{Schema: text, Type: typ}); err != nil {
			b.Fatal(err)
		}
	}
	reg, err := schema.New(schema.Settings{URLs: []string{fake.URL()}}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	wire, err := reg.Encode(context.Background(), "in", false, schema.Codec{Format: format}, benchValue)
	if err != nil {
		b.Fatal(err)
	}
	return fake, reg, wire
}

// BenchmarkCodec is the bridge's cost per record of an encoded port, against the JSON
// pass-through of a plain one: for json the payload is only checked to be JSON (what the pool
// does before writing it to the program); for avro and protobuf a record's value is decoded
// into the item's JSON (decode) and an emit's JSON encoded into the wire format (encode), with
// the schema cached (the steady state: fetched once per id). One op is one record; ns/op and
// allocs/op are per record.
//
//	go test -run '^$' -bench BenchmarkCodec -benchmem ./bridge/
func BenchmarkCodec(b *testing.B) {
	ctx := context.Background()
	b.Run("json/pass-through", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(benchValue)))
		for b.Loop() {
			if !json.Valid(benchValue) {
				b.Fatal("benchValue is not JSON")
			}
		}
	})
	for _, f := range benchFormats[1:] {
		_, reg, wire := benchRegistry(b, f.typ, f.text, f.format)
		c := schema.Codec{Format: f.format}
		b.Run(f.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(wire)))
			for b.Loop() {
				if _, err := reg.Decode(ctx, "in", false, c, wire); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(f.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(benchValue)))
			for b.Loop() {
				if _, err := reg.Encode(ctx, "out", false, c, benchValue); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBridgeEncoded is BenchmarkBridge's row of the Go echo child (4 partitions, one
// process) for a plain JSON topic and for an Avro and a Protobuf one: `millrace bridge` with
// --decode in=FORMAT --encode out=FORMAT against an srfake registry, every record decoded for
// the child and its echo encoded again. It reports records/s and the streamlet process's own
// CPU per record, to set beside the JSON row.
//
//	go test -run '^$' -bench BenchmarkBridgeEncoded -benchtime 3s ./bridge/
func BenchmarkBridgeEncoded(b *testing.B) {
	dir := b.TempDir()
	millrace, goEcho := filepath.Join(dir, "millrace"), filepath.Join(dir, "go-echo")
	for bin, pkg := range map[string]string{millrace: "../cmd/millrace", goEcho: "../actions/go-echo"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	for _, f := range benchFormats {
		b.Run(fmt.Sprintf("go/bridge-c1/p4/%s", f.name), func(b *testing.B) {
			line, env, value := "bench --in in=bench.v1 --out out=bench.v1 -- "+goEcho, "MILLRACE_SCHEMA_REGISTRY_URL=", benchValue
			if f.format != "" {
				fake, _, wire := benchRegistry(b, f.typ, f.text, f.format)
				line = fmt.Sprintf("bench --in in=bench.v1 --out out=bench.v1 --decode in=%s --encode out=%s -- %s", f.format, f.format, goEcho)
				env, value = "MILLRACE_SCHEMA_REGISTRY_URL="+fake.URL(), wire
			}
			words, err := actionconf.Split(line)
			if err != nil {
				b.Fatal(err)
			}
			addr, cmd := startProc(b, exec.Command(millrace, append([]string{"bridge"}, words...)...), env)
			benchStreamletOf(b, addr, cmd, 4, nil, value)
		})
	}
}
