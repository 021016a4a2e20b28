package actionconf_test

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge/actionconf"
)

func TestParseEncodings(t *testing.T) {
	a, err := actionconf.ParseString(`bridge-avro --in listings=listing.v1 --out scores=score.v1 --out rejects=listing.v1 \
  --decode listings=avro --decode listings.key=avro:acme.ListingKey,strategy=record \
  --encode scores=protobuf:acme.Score,version=3 --encode=scores.key=jsonschema,subject=score-keys \
  --dead-letter rejects -- ./bridge.sh`)
	if err != nil {
		t.Fatal(err)
	}
	wantIn := actionconf.Port{Name: "listings", Schema: "listing.v1",
		Value: actionconf.Encoding{Format: actionconf.FormatAvro},
		Key:   actionconf.Encoding{Format: actionconf.FormatAvro, Record: "acme.ListingKey", Strategy: actionconf.StrategyRecord}}
	wantOut := actionconf.Port{Name: "scores", Schema: "score.v1",
		Value: actionconf.Encoding{Format: actionconf.FormatProtobuf, Record: "acme.Score", Version: 3},
		Key:   actionconf.Encoding{Format: actionconf.FormatJSONSchema, Subject: "score-keys"}}
	if !reflect.DeepEqual(a.Inlets[0], wantIn) || !reflect.DeepEqual(a.Outlets[0], wantOut) || a.Outlets[1].Value.Encoded() {
		t.Errorf("ports = %+v, %+v; want %+v, %+v and a plain rejects", a.Inlets, a.Outlets, wantIn, wantOut)
	}
	if !a.Encoded() {
		t.Error("Encoded() = false for a line with --decode")
	}
	b, err := actionconf.ParseString(a.Line())
	if err != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("ParseString(Line()) = %+v, %v; want %+v (line %s)", b, err, a, a.Line())
	}
	if d := a.Descriptor(); d.GetInlets()[0].GetContract().GetFormat() != "json" {
		t.Errorf("descriptor contract of an encoded inlet = %v; want json, the program's side", d.GetInlets()[0].GetContract())
	}
	plain, err := actionconf.ParseString(`s --in a=b -- x`)
	if err != nil || plain.Encoded() || strings.Contains(plain.Line(), "--decode") {
		t.Errorf("a plain line: Encoded() = %v, Line() = %q, %v", plain.Encoded(), plain.Line(), err)
	}
	id, err := actionconf.ParseString(`s --in a=b --out o=c --encode o=avro,id=7 -- x`)
	if err != nil || id.Outlets[0].Value.ID != 7 {
		t.Errorf("--encode o=avro,id=7 = %+v, %v", id.Outlets, err)
	}
}

func TestParseEncodingErrors(t *testing.T) {
	tests := []struct {
		line string
		word int
		want string
	}{
		{`s --in a=b --decode -- x`, 4, "--decode expects PORT[.key]=FORMAT"},
		{`s --in a=b --decode a -- x`, 5, "--decode expects PORT[.key]=FORMAT"},
		{`s --in a=b --decode a.value=avro -- x`, 5, `after the port comes .key`},
		{`s --in a=b --decode A=avro -- x`, 5, `port name "A"`},
		{`s --in a=b --decode a=avor -- x`, 5, `format "avor": expected avro, protobuf or jsonschema`},
		{`s --in a=b --decode a=avro: -- x`, 5, "after : comes the record's full name"},
		{`s --in a=b --decode a=avro,colour=red -- x`, 5, `unknown option "colour"`},
		{`s --in a=b --decode a=avro,strategy -- x`, 5, `expected NAME=VALUE`},
		{`s --in a=b --decode a=avro,strategy=name -- x`, 5, `strategy "name": expected topic`},
		{`s --in a=b --decode a=avro,strategy=record -- x`, 5, "strategy=record names the subject after the record: give its full name, e.g. --decode a=avro:acme.Listing,strategy=record"},
		{`s --in a=b --decode a=avro,subject=x,strategy=topic -- x`, 5, "strategy= and subject= both"},
		{`s --in a=b --decode a=avro,version=2 -- x`, 5, "version is for --encode"},
		{`s --in a=b --out o=c --encode o=avro,version=0 -- x`, 7, "version=0: expected a whole number from 1"},
		{`s --in a=b --out o=c --encode o=avro,version=2,id=3 -- x`, 7, "version= and id= both"},
		{`s --in a=b --out o=c --encode o=avro,id=3,subject=z -- x`, 7, "id= names the schema exactly, so subject= names nothing"},
		{`s --in a=b --out o=c --encode o=avro,id=3,id=4 -- x`, 7, "option id is given twice"},
		{`s --in a=b --out o=c --decode o=avro -- x`, 7, `--decode is for an inlet, and "o" is not one: write --encode o=avro`},
		{`s --in a=b --out o=c --encode a=avro -- x`, 7, `--encode is for an outlet, and "a" is not one: write --decode a=avro`},
		{`s --in a=b --decode z=avro -- x`, 5, `--decode names port "z", which the line does not declare: declare it with --in z=SCHEMA`},
		{`s --in a=b --decode a=avro --decode a=protobuf -- x`, 7, `the values of port "a" are declared encoded twice`},
		{`s --in a=b --out dl=c --dead-letter dl --encode dl=avro -- x`, 9, `"dl" is the --dead-letter or --fallback port`},
	}
	for _, tt := range tests {
		_, err := actionconf.ParseString(tt.line)
		var le *actionconf.LineError
		if !errors.As(err, &le) || !errors.Is(err, actionconf.ErrConfig) {
			t.Errorf("ParseString(%q) = %v; want a *LineError", tt.line, err)
			continue
		}
		if le.Index+1 != tt.word || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseString(%q) = %v (word %d); want word %d and %q", tt.line, err, le.Index+1, tt.word, tt.want)
		}
	}
}

// TestEncodedTopicsGuide: the guide the config line's --decode and --encode point to exists
// and covers their forms.
func TestEncodedTopicsGuide(t *testing.T) {
	guide, err := os.ReadFile("../../docs/encoded-topics.md")
	if err != nil {
		t.Fatalf("the guide docs/action-config.md links: %v", err)
	}
	for _, word := range []string{"--decode", "--encode", "strategy=record", "version=", "id=", "schemas/"} {
		if !strings.Contains(string(guide), word) {
			t.Errorf("docs/encoded-topics.md does not mention %s", word)
		}
	}
}
