package schema_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/schema"
	"github.com/ankka-flow/millrace/internal/testkit"
)

// pipInstall is what scripts/setup runs for the cross-check.
const pipInstall = `python3 -m pip install --user 'confluent-kafka[avro,protobuf,json,schemaregistry]'`

// python runs python3 with args, failing the test with its output if it fails.
func python(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", args...)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python3 %v: %v\n%s", args, err, out)
	}
}

// TestConfluentPython: what confluent-kafka-python's AvroSerializer, ProtobufSerializer and
// JSONSerializer write against the registry decodes to the documented JSON; what Encode makes
// of that JSON, their deserializers read back as the value produced (for the evolved Avro
// record: as the pinned newer schema's value). It runs against the real registry
// MILLRACE_SCHEMA_REGISTRY_TEST_URL names, if set, else srfake. It needs python3 with confluent-kafka and
// protoc, which scripts/setup installs; without them it fails, saying so.
func TestConfluentPython(t *testing.T) {
	testkit.NeedPython(t, pipInstall, "confluent_kafka.schema_registry.avro", "confluent_kafka.schema_registry.protobuf", "confluent_kafka.schema_registry.json_schema")
	testkit.NeedTools(t, "protoc") // the cross-check generates its _pb2 modules
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Fatalf("the cross-check generates its _pb2 modules with protoc (scripts/setup installs it): %v", err)
	}
	dir := t.TempDir()
	gen := filepath.Join(dir, "gen")
	if err := os.Mkdir(gen, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(protoc, "-I", "testdata", "--python_out="+gen, "shop/common.proto", "shop/order.proto").CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}

	tg := newTarget(t)
	python(t, "testdata/confluent.py", "produce", tg.url, dir, tg.prefix)
	ctx := context.Background()
	avroV2 := schema.Codec{Format: schema.Avro, Version: 2}
	for _, tc := range []struct {
		name, topic string
		decode      schema.Codec
		want        string
		encode      schema.Codec
	}{
		{"avro", "py-avro", schema.Codec{Format: schema.Avro}, orderJSON, schema.Codec{Format: schema.Avro}},
		{"avro-v1", "py-evo", avroV2, `{"name":"ann","email":"none"}`, avroV2},
		{"avro-v2", "py-evo", schema.Codec{Format: schema.Avro}, `{"name":"bo","email":"b@x"}`, schema.Codec{Format: schema.Avro}},
		{"protobuf", "py-proto", schema.Codec{Format: schema.Protobuf}, orderProtoJSON, schema.Codec{Format: schema.Protobuf}},
		{"protobuf-nested", "py-proto-reason", schema.Codec{Format: schema.Protobuf}, `{"text":"late"}`,
			schema.Codec{Format: schema.Protobuf, Record: "shop.Refund.Reason"}},
		{"json", "py-json", schema.Codec{Format: schema.JSONSchema}, `{"name":"ann","age":30,"tags":["a","b"]}`, schema.Codec{Format: schema.JSONSchema}},
	} {
		data, err := os.ReadFile(filepath.Join(dir, tc.name+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := tg.reg.Decode(ctx, tg.name(tc.topic), false, tc.decode, data)
		if err != nil {
			t.Errorf("%s: Decode of confluent-kafka-python's %x: %v", tc.name, data, err)
			continue
		}
		sameJSON(t, tc.name+": Decode", got, tc.want)
		enc, err := tg.reg.Encode(ctx, tg.name(tc.topic), false, tc.encode, got)
		if err != nil {
			t.Errorf("%s: Encode(%s): %v", tc.name, got, err)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "go-"+tc.name+".bin"), enc, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if t.Failed() {
		return
	}
	python(t, "testdata/confluent.py", "consume", tg.url, dir, tg.prefix)
}
