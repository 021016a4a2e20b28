package actionconf

import (
	"strconv"
	"strings"
)

// The formats and subject strategies of a registry-encoded port, as the config line spells
// them (the same words as package internal/schema's Format and Strategy values, which this
// package does not link: a tool that only reads a line stays small).
const (
	FormatAvro       = "avro"
	FormatProtobuf   = "protobuf"
	FormatJSONSchema = "jsonschema"

	StrategyTopic       = "topic"        // "<topic>-value" / "<topic>-key"; the default
	StrategyRecord      = "record"       // "<record full name>"
	StrategyTopicRecord = "topic-record" // "<topic>-<record full name>"
)

// Encoding says how the values (or the keys) of a port are encoded on Kafka when they are not
// plain JSON: in the Confluent wire format, with a schema from a schema registry. The zero
// value is plain JSON, as the program reads and writes it.
type Encoding struct {
	Format   string // FormatAvro, FormatProtobuf or FormatJSONSchema; "" is plain JSON
	Strategy string // the subject strategy; "" is StrategyTopic
	Record   string // the record's (message's) full name: the record strategies need it; it picks the message of a .proto that has several
	Subject  string // an explicit subject, in place of the strategy's
	Version  int    // an outlet's values are encoded with this version of the subject; 0 is the latest
	ID       int    // or with exactly this schema id; 0 is by subject and version
}

// Encoded reports whether the values or keys of p are registry-encoded.
func (e Encoding) Encoded() bool { return e.Format != "" }

// Encoded reports whether any port of a is registry-encoded: only then does the bridge need a
// schema registry.
func (a *Action) Encoded() bool {
	for _, ports := range [][]Port{a.Inlets, a.Outlets} {
		for _, p := range ports {
			if p.Value.Encoded() || p.Key.Encoded() {
				return true
			}
		}
	}
	return false
}

// String writes e as the config line does after PORT=: FORMAT[:RECORD][,OPTION…].
func (e Encoding) String() string {
	s := e.Format
	if e.Record != "" {
		s += ":" + e.Record
	}
	if e.Strategy != "" && e.Strategy != StrategyTopic {
		s += ",strategy=" + e.Strategy
	}
	if e.Subject != "" {
		s += ",subject=" + e.Subject
	}
	if e.Version != 0 {
		s += ",version=" + strconv.Itoa(e.Version)
	}
	if e.ID != 0 {
		s += ",id=" + strconv.Itoa(e.ID)
	}
	return s
}

// encodingWords are the --decode and --encode words of a's ports, for Line.
func (a *Action) encodingWords() []string {
	var w []string
	add := func(flag string, p Port) {
		if p.Value.Encoded() {
			w = append(w, flag, p.Name+"="+p.Value.String())
		}
		if p.Key.Encoded() {
			w = append(w, flag, p.Name+".key="+p.Key.String())
		}
	}
	for _, p := range a.Inlets {
		add("--decode", p)
	}
	for _, p := range a.Outlets {
		add("--encode", p)
	}
	return w
}

// codecFlag is one --decode or --encode as given: resolved against the ports once the whole
// line is read (a port may be declared after it).
type codecFlag struct {
	flag string // --decode or --encode
	at   int    // the word that holds its value
	port string
	key  bool
	enc  Encoding
}

const encodingForm = "PORT[.key]=FORMAT[:RECORD][,OPTION…] (e.g. --decode listings=avro, --encode scores=protobuf:acme.Score,version=3)"

// parseCodecFlag reads the value v of --decode or --encode (word at).
func (p *lineParser) parseCodecFlag(flag, v string, at int) (codecFlag, error) {
	f := codecFlag{flag: flag, at: at}
	target, spec, ok := strings.Cut(v, "=")
	if !ok || spec == "" {
		return f, p.errAt(at, "%s expects %s", flag, encodingForm)
	}
	port, part, dotted := strings.Cut(target, ".")
	switch {
	case dotted && part != "key":
		return f, p.errAt(at, "%q: after the port comes .key (its keys) or nothing (its values), e.g. %s %s.key=avro", target, flag, port)
	case !nameRE.MatchString(port):
		return f, p.errAt(at, "port name %q: expected 1 to 63 characters of a-z, 0-9 and -", port)
	}
	f.port, f.key = port, dotted
	opts := strings.Split(spec, ",")
	format, record, _ := strings.Cut(opts[0], ":")
	switch format {
	case FormatAvro, FormatProtobuf, FormatJSONSchema:
	default:
		return f, p.errAt(at, "format %q: expected avro, protobuf or jsonschema, e.g. %s %s=avro", format, flag, target)
	}
	if strings.Contains(opts[0], ":") && record == "" {
		return f, p.errAt(at, "%q: after : comes the record's full name, e.g. %s:acme.Listing; or drop the :", opts[0], format)
	}
	if strings.ContainsAny(record, " \t\r\n:") {
		return f, p.errAt(at, "record name %q: expected a full name such as acme.Listing", record)
	}
	f.enc = Encoding{Format: format, Record: record}
	seen := map[string]bool{}
	for _, o := range opts[1:] {
		name, val, ok := strings.Cut(o, "=")
		if !ok || val == "" {
			return f, p.errAt(at, "option %q: expected NAME=VALUE, one of strategy=topic|record|topic-record, subject=NAME, version=N, id=N", o)
		}
		if seen[name] {
			return f, p.errAt(at, "option %s is given twice; give it once", name)
		}
		seen[name] = true
		switch name {
		case "strategy":
			switch val {
			case StrategyTopic, StrategyRecord, StrategyTopicRecord:
				f.enc.Strategy = val
			default:
				return f, p.errAt(at, "strategy %q: expected topic (the default: the subject <topic>-value), record (<record>) or topic-record (<topic>-<record>)", val)
			}
		case "subject":
			if strings.ContainsAny(val, " \t\r\n") {
				return f, p.errAt(at, "subject %q: expected no blanks", val)
			}
			f.enc.Subject = val
		case "version", "id":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > 1<<31-1 {
				return f, p.errAt(at, "%s=%s: expected a whole number from 1 up", name, val)
			}
			if flag == "--decode" {
				return f, p.errAt(at, "%s is for --encode: a record read names its schema id itself; drop %s=%s", name, name, val)
			}
			if name == "version" {
				f.enc.Version = n
			} else {
				f.enc.ID = n
			}
		default:
			return f, p.errAt(at, "unknown option %q: expected strategy=topic|record|topic-record, subject=NAME, version=N or id=N", name)
		}
	}
	e := f.enc
	switch {
	case e.Strategy != "" && e.Subject != "":
		return f, p.errAt(at, "strategy= and subject= both name the subject; give one of them")
	case (e.Strategy == StrategyRecord || e.Strategy == StrategyTopicRecord) && e.Record == "":
		return f, p.errAt(at, "strategy=%s names the subject after the record: give its full name, e.g. %s %s=%s:acme.Listing,strategy=%s", e.Strategy, flag, target, e.Format, e.Strategy)
	case e.Version != 0 && e.ID != 0:
		return f, p.errAt(at, "version= and id= both pin the schema; give one of them")
	case e.ID != 0 && (e.Strategy != "" || e.Subject != ""):
		return f, p.errAt(at, "id= names the schema exactly, so %s names nothing; drop one of them", map[bool]string{true: "strategy=", false: "subject="}[e.Strategy != ""])
	}
	return f, nil
}

// resolveCodecs sets the encodings of --decode and --encode on a's ports, each checked against
// what the port is.
func (p *lineParser) resolveCodecs(a *Action, flags []codecFlag) error {
	for _, f := range flags {
		ports, other, want, wantFlag := a.Inlets, a.Outlets, "an inlet", "--encode"
		if f.flag == "--encode" {
			ports, other, want, wantFlag = a.Outlets, a.Inlets, "an outlet", "--decode"
		}
		i := portIndex(ports, f.port)
		if i < 0 {
			if portIndex(other, f.port) >= 0 {
				return p.errAt(f.at, "%s is for %s, and %q is not one: write %s %s (the bridge decodes what it reads and encodes what it writes)", f.flag, want, f.port, wantFlag, p.words[f.at])
			}
			decl := map[string]string{"--decode": "--in", "--encode": "--out"}[f.flag]
			return p.errAt(f.at, "%s names port %q, which the line does not declare: declare it with %s %s=SCHEMA", f.flag, f.port, decl, f.port)
		}
		if f.flag == "--encode" && (f.port == a.DeadLetter || f.port == a.Fallback) {
			return p.errAt(f.at, "outlet %q is the --dead-letter or --fallback port, which gets the input record's bytes unchanged: drop this --encode (it is encoded as its inlet is)", f.port)
		}
		slot := &ports[i].Value
		if f.key {
			slot = &ports[i].Key
		}
		if slot.Encoded() {
			return p.errAt(f.at, "the %s of port %q are declared encoded twice; give one %s for them", map[bool]string{true: "keys", false: "values"}[f.key], f.port, f.flag)
		}
		*slot = f.enc
	}
	return nil
}

func portIndex(ports []Port, name string) int {
	for i, q := range ports {
		if q.Name == name {
			return i
		}
	}
	return -1
}
