package e2e_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ankka-flow/millrace/internal/testkit"
)

// priceBand is actions/price-band (bash and jq): Avro listings in, Protobuf price bands out,
// listings without rooms dead-lettered; its bridge uses the schema registry at url.
func priceBand(url string) action {
	dir := filepath.Join(bin.root, "actions/price-band")
	return action{
		name: "price-band", args: []string{"--config", filepath.Join(dir, "action.conf")}, describe: dir,
		in: "listings", outs: []string{"bands", "rejects"}, dead: "rejects",
		env: []string{"MILLRACE_SCHEMA_REGISTRY_URL=" + url},
	}
}

// requireConfluentPython fails the test, naming the fix, unless python3 has
// confluent-kafka-python with its Avro and Protobuf serdes and protoc is there for the
// descriptors: the point of the test is that the official serdes read what millrace writes.
func requireConfluentPython(t *testing.T) {
	t.Helper()
	testkit.NeedTools(t, "protoc")
	testkit.NeedPython(t, "python3 -m pip install --user 'confluent-kafka[avro,protobuf,json,schemaregistry]'", "confluent_kafka.schema_registry.avro", "confluent_kafka.schema_registry.protobuf", "fastavro", "google.protobuf")
}

// python runs testdata/confluent.py with args, lines on stdin, and returns its output lines.
func python(t *testing.T, lines []string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("python3", append([]string{filepath.Join(bin.root, "e2e/testdata/confluent.py")}, args...)...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("confluent.py %s: %v\n%s", args[0], err, stderr.String())
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(lines) {
		t.Fatalf("confluent.py %s: %d lines for %d", args[0], len(got), len(lines))
	}
	return got
}

// TestRegistryAvroToProtobuf: the bash action reads an Avro topic and writes a Protobuf one
// through the real sidecar and bridge. The listings are written by confluent-kafka-python's
// AvroSerializer, the bands read back by its ProtobufDeserializer and the dead letters (the
// input records, unchanged) by its AvroDeserializer; every record is accounted for.
func TestRegistryAvroToProtobuf(t *testing.T) {
	requireConfluentPython(t)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	b := newBroker(t)
	pl := newPipeline(t, b, priceBand(reg.URL()), 2)
	dir := filepath.Join(bin.root, "actions/price-band")
	avsc, err := os.ReadFile(filepath.Join(dir, "schemas/listings.avsc"))
	if err != nil {
		t.Fatal(err)
	}
	proto, err := os.ReadFile(filepath.Join(dir, "schemas/bands.proto"))
	if err != nil {
		t.Fatal(err)
	}
	inSubject, outSubject := pl.inTopic+"-value", pl.outTopics["bands"]+"-value"
	if _, _, err := reg.RegisterSchema(inSubject, sr.Schema{Schema: string(avsc), Type: sr.TypeAvro}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.RegisterSchema(outSubject, sr.Schema{Schema: string(proto), Type: sr.TypeProtobuf}); err != nil {
		t.Fatal(err)
	}
	// The listings, every tenth without rooms; cities, and none, in turn.
	n := ciN(100)
	type listing struct {
		ID    string  `json:"id"`
		Price int64   `json:"price"`
		Rooms int32   `json:"rooms"`
		City  *string `json:"city"`
	}
	cities := []string{"Oslo", "Bergen", "Tromsø"}
	listings := make([]listing, n)
	plain := make([]string, n) // as the Python serializer takes them (a union's value bare)
	for i := range listings {
		l := listing{ID: fmt.Sprintf("id-%07d", i), Price: int64(50_000 + 7_919*i), Rooms: int32(i % 5)}
		if i%10 == 0 {
			l.Rooms = 0
		} else if l.Rooms == 0 {
			l.Rooms = 3
		}
		if i%4 != 3 {
			l.City = &cities[i%3]
		}
		listings[i] = l
		j, _ := json.Marshal(l)
		plain[i] = string(j)
	}
	values := make([][]byte, n)
	for i, line := range python(t, plain, "serialize-avro", reg.URL(), pl.inTopic, filepath.Join(dir, "schemas/listings.avsc")) {
		if values[i], err = base64.StdEncoding.DecodeString(line); err != nil {
			t.Fatal(err)
		}
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(listings[i].ID), Value: values[i]}
	}

	pl.start(0)
	pl.produce(recs...)
	pl.waitDone(60 * time.Second)
	tl := pl.tally()
	pl.report("registry: Avro in, Protobuf out (bash)", tl, "")
	tl.check(t)
	if tl.out != n-(n+9)/10 || tl.dead != (n+9)/10 || tl.dup != 0 {
		t.Fatalf("tally = %s; want %d bands and %d dead letters, each once", tl, n-(n+9)/10, (n+9)/10)
	}

	// The bands, read as a consumer with the official deserializer reads them.
	var ids, b64 []string
	for id, rs := range tl.outRecords {
		ids = append(ids, id)
		b64 = append(b64, base64.StdEncoding.EncodeToString(rs[0].Value))
	}
	var bands []string
	descriptors := filepath.Join(t.TempDir(), "bands.pb")
	if out, err := exec.Command("protoc", "-I", filepath.Join(dir, "schemas"), "--descriptor_set_out="+descriptors, "bands.proto").CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	bands = python(t, b64, "deserialize-protobuf", reg.URL(), pl.outTopics["bands"], descriptors, "acme.PriceBand")
	byID := map[string]listing{}
	for _, l := range listings {
		byID[l.ID] = l
	}
	for i, id := range ids {
		l := byID[id]
		ppr := float64(l.Price) / float64(l.Rooms)
		band := "HIGH"
		if ppr < 100_000 {
			band = "LOW"
		} else if ppr < 200_000 {
			band = "MID"
		}
		want := map[string]any{"listingId": id, "rooms": float64(l.Rooms), "pricePerRoom": ppr, "band": band}
		if l.City != nil {
			want["city"] = *l.City
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(bands[i]), &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("band of %s = %s (%v); want %v", id, bands[i], err, want)
		}
	}

	// The dead letters are the input records, unchanged: still Avro.
	var dead []string
	for _, r := range tl.deadRecords {
		dead = append(dead, base64.StdEncoding.EncodeToString(r.Value))
	}
	for i, line := range python(t, dead, "deserialize-avro", reg.URL(), pl.inTopic) {
		var got listing
		if err := json.Unmarshal([]byte(line), &got); err != nil || !reflect.DeepEqual(got, byID[string(tl.deadRecords[i].Key)]) {
			t.Errorf("dead letter %s reads back as %s (%v); want the listing as written", tl.deadRecords[i].Key, line, err)
		}
	}
}
