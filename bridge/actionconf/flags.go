package actionconf

import (
	"strconv"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/protocol"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// lineFlag is one flag of the action config line, declared once: the parser reads it by its
// row, and the unknown-flag error, `millrace bridge -h` ([Flags]) and docs/action-config.md's
// table ([FlagsMarkdown], held by TestDocsFlags) list it from the same row. A new flag is a
// row here (and the field of [Action] it sets).
type lineFlag struct {
	name string // --in
	form string // its value's form, PORT=SCHEMA; "" for a flag without a value
	want string // what the parser asks for when the value is missing
	help string // the -h line
	doc  string // the docs table's text
	def  string // the default as the docs write it (in -h without backticks); "" none
	once bool   // may be given once only
	set  func(p *lineParser, flag, v string, at int) error
}

// lineFlags are the config line's flags, in the order the error, -h and the docs list them.
var lineFlags = []lineFlag{
	{name: "--in", form: "PORT=SCHEMA", want: "PORT=SCHEMA (e.g. --in listings=listing.v1)", set: setPort,
		help: "an inlet (at least one)", doc: "an inlet: contract format `json`, the schema name as given, its fingerprint computed; port names (`[a-z0-9-]{1,63}`) are unique across inlets and outlets; at least one"},
	{name: "--out", form: "PORT=SCHEMA", want: "PORT=SCHEMA (e.g. --out listings=listing.v1)", set: setPort,
		help: "an outlet", doc: "an outlet, likewise"},
	{name: "--decode", form: "PORT[.key]=FORMAT[:RECORD][,OPTION…]", want: encodingForm, def: "plain JSON", set: setCodec,
		help: "the inlet's values (keys) are registry-encoded: FORMAT avro, protobuf or jsonschema; options strategy=topic|record|topic-record, subject=NAME (docs/encoded-topics.md)",
		doc:  "the inlet's values (`.key`: its keys) are registry-encoded (Confluent wire format): `FORMAT` is `avro`, `protobuf` or `jsonschema`; the bridge decodes each record to JSON for the program with the schema its id names; `RECORD` is the record's full name; options `strategy=topic` (subject `<topic>-value`, the default), `record` (`<RECORD>`) or `topic-record` (`<topic>-<RECORD>`), or `subject=NAME`; see [docs/encoded-topics.md](encoded-topics.md)"},
	{name: "--encode", form: "PORT[.key]=FORMAT[:RECORD][,OPTION…]", want: encodingForm, def: "plain JSON", set: setCodec,
		help: "the outlet's values (keys) are encoded with the subject's latest schema, or version=N, or id=N",
		doc:  "the outlet's values (keys) are encoded from the program's JSON with the subject's latest schema, or `version=N`, or exactly `id=N`; a payload that does not fit fails its record for good (naming the field); `RECORD` picks the message of a `.proto` with several; not on the `--dead-letter`/`--fallback` port"},
	{name: "--state", form: "PORT[,ttl=D][,max-bytes=SIZE]", want: stateForm, def: "no state; `ttl` none, `max-bytes` `" + sizeWord(engine.DefaultStateMaxBytes) + "`", set: setState,
		help: "the inlet's keys keep state (one word per inlet): ttl at least 1s, max-bytes at most 1Mi (docs/state.md)",
		doc:  "the inlet's records' keys keep state (one word per inlet, repeat it for several; never an outlet): each item carries its key's state and the program may stage a new one (see [docs/state.md](state.md)); `ttl` (a duration, at least `1s`) forgets a state written longer ago; `max-bytes` (a memory size, at most `1Mi`) bounds one state's JSON; a line with it reports protocol 1.1 at discovery, one without 1.0"},
	{name: "--param", form: "KEY:TYPE[=DEFAULT]", want: "KEY:TYPE[=DEFAULT] (e.g. --param min-rooms:integer=2)", set: setParam,
		help: "a config parameter: TYPE string, integer, double, boolean, duration or memory-size; no default: required at deploy time",
		doc:  "a config parameter; `KEY` is `[a-z][a-z0-9-]*`, `TYPE` one of `string`, `integer`, `double`, `boolean`, `duration`, `memory-size`; the default must parse as its type; without one the parameter is required at deploy time (an empty default cannot be told from none, so it is refused)"},
	{name: "--concurrency", form: "N", want: "a whole number", def: "`" + strconv.Itoa(defaults.Concurrency) + "`", once: true, set: setCount(1, func(a *Action) *int { return &a.Concurrency }),
		help: "processes of the program", doc: "processes of the program"},
	{name: "--per-item", def: "off", once: true, set: func(p *lineParser, _, _ string, _ int) error { p.a.PerItem = true; return nil },
		help: "a fresh process for every item", doc: "a fresh process for every item"},
	{name: "--timeout", form: "D", want: "a duration (e.g. 30s, 2m)", def: "`" + durationText(defaults.Timeout) + "`", once: true, set: setDuration(0, func(a *Action) *time.Duration { return &a.Timeout }),
		help: "per attempt of an item (0s: none); a timeout is retried", doc: "per attempt of an item (`0s`: none); a timeout is retried"},
	{name: "--ready-timeout", form: "D", want: "a duration (e.g. 30s, 2m)", def: "`" + durationText(defaults.ReadyTimeout) + "`", once: true, set: setDuration(1, func(a *Action) *time.Duration { return &a.ReadyTimeout }),
		help: "from hello to ready", doc: "from `hello` to `ready`"},
	{name: "--window", form: "N", want: "a whole number", def: "`" + strconv.Itoa(defaults.Window) + "`", once: true, set: setCount(0, func(a *Action) *int { return &a.Window }),
		help: "deliveries written ahead to one process (0: as the program's ready says)", doc: "deliveries written ahead to one process (0: as the program's `ready` says, else one at a time)"},
	{name: "--retries", form: "N", want: "a whole number", def: "`" + strconv.Itoa(defaults.Retries) + "`", once: true, set: setCount(0, func(a *Action) *int { return &a.Retries }),
		help: "retries of a retryable error, crash or timeout", doc: "retries of a retryable error, crash or timeout, with exponential backoff and jitter"},
	{name: "--dead-letter", form: "PORT", want: "the name of an outlet declared with --out", def: "none", once: true,
		set:  func(p *lineParser, _, v string, at int) error { p.a.DeadLetter, p.deadLetterAt = v, at; return nil },
		help: "outlet for a record that failed for good (without it the batch fails)", doc: "outlet for a record that failed for good; without it the batch gets `Fail`"},
	{name: "--fallback", form: "PORT", want: "the name of an outlet declared with --out", def: "none", once: true,
		set:  func(p *lineParser, _, v string, at int) error { p.a.Fallback, p.fallbackAt = v, at; return nil },
		help: "outlet for a record the program abstained on", doc: "outlet for a record the program abstained on; without it an abstain fails for good"},
	{name: "--effects", form: "external|none", want: "external or none", def: "none", once: true, set: setEffects,
		help: "external: the program changes something outside", doc: "the program changes something outside (it should pass `idempotencyKey` on); `none` is the default"},
	{name: "--description", form: "TEXT", want: "a text (quote it when it has blanks)", def: "empty", once: true,
		set:  func(p *lineParser, _, v string, _ int) error { p.a.Description = v; return nil },
		help: "the descriptor's description", doc: "the descriptor's description"},
	{name: "--metrics", form: "ADDR", want: "an address to serve Prometheus metrics on, e.g. :9090", def: "off", once: true, set: setMetrics,
		help: "serve Prometheus metrics at http://ADDR/metrics", doc: "serve Prometheus metrics at `http://ADDR/metrics`"},
}

// flagIndex finds a flag's row by its name.
var flagIndex = func() map[string]*lineFlag {
	m := make(map[string]*lineFlag, len(lineFlags))
	for i := range lineFlags {
		m[lineFlags[i].name] = &lineFlags[i]
	}
	return m
}()

// flagNames lists the flags for the unknown-flag error: --in, --out, ….
func flagNames() string {
	names := make([]string, len(lineFlags))
	for i, f := range lineFlags {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// Flag is one flag of the action config line as `millrace bridge -h` shows it.
type Flag struct {
	Usage   string // --in PORT=SCHEMA
	Help    string
	Default string // as a line without the flag has it; "" when it has none to show
}

// Flags returns the config line's flags, for `millrace bridge -h`.
func Flags() []Flag {
	out := make([]Flag, len(lineFlags))
	for i, f := range lineFlags {
		out[i] = Flag{Usage: f.usage(), Help: f.help, Default: strings.ReplaceAll(f.def, "`", "")}
	}
	return out
}

// FlagsMarkdown writes the config line's flags as docs/action-config.md's table: flag,
// meaning, default.
func FlagsMarkdown() string {
	var b strings.Builder
	b.WriteString("| flag | meaning | default |\n| --- | --- | --- |\n")
	for _, f := range lineFlags {
		def := f.def
		if def == "" {
			def = "—"
		}
		usage := strings.ReplaceAll(f.usage(), "|", `\|`) // a | inside a cell ends it
		b.WriteString("| `" + usage + "` | " + f.doc + " | " + def + " |\n")
	}
	return b.String()
}

func (f lineFlag) usage() string {
	if f.form == "" {
		return f.name
	}
	return f.name + " " + f.form
}

// durationText writes d as the docs do: 1m, 10s.
func durationText(d time.Duration) string {
	s := d.String()
	s, _ = strings.CutSuffix(s, "m0s")
	if s != d.String() {
		s += "m"
	}
	return s
}

// setPort reads --in and --out: PORT=SCHEMA, a port name unique across inlets and outlets.
func setPort(p *lineParser, flag, v string, at int) error {
	port, schema, ok := strings.Cut(v, "=")
	switch {
	case !ok || schema == "":
		return p.errAt(at, "%s expects PORT=SCHEMA, e.g. %s listings=listing.v1", flag, flag)
	case !nameRE.MatchString(port):
		return p.errAt(at, "port name %q: expected 1 to 63 characters of a-z, 0-9 and -", port)
	case strings.TrimSpace(schema) != schema || strings.ContainsAny(schema, " \t\r\n"):
		return p.errAt(at, "schema name %q: expected no blanks, e.g. listing.v1", schema)
	}
	if first, dup := p.ports[port]; dup {
		return p.errAt(at, "port %q is declared twice (first in word %d); port names are unique across inlets and outlets", port, first+1)
	}
	p.ports[port] = at
	if flag == "--in" {
		p.a.Inlets = append(p.a.Inlets, Port{Name: port, Schema: schema})
	} else {
		p.a.Outlets = append(p.a.Outlets, Port{Name: port, Schema: schema})
	}
	return nil
}

// setCodec reads --decode and --encode, resolved once every port is known.
func setCodec(p *lineParser, flag, v string, at int) error {
	f, err := p.parseCodecFlag(flag, v, at)
	p.codecs = append(p.codecs, f)
	return err
}

// setState reads --state, resolved once every port is known.
func setState(p *lineParser, _, v string, at int) error {
	f, err := p.parseStateFlag(v, at)
	p.states = append(p.states, f)
	return err
}

// setParam reads --param KEY:TYPE[=DEFAULT].
func setParam(p *lineParser, _, v string, at int) error {
	spec, def, hasDef := strings.Cut(v, "=")
	key, typ, ok := strings.Cut(spec, ":")
	if !ok {
		return p.errAt(at, "--param expects KEY:TYPE[=DEFAULT], e.g. --param min-rooms:integer=2")
	}
	if !keyRE.MatchString(key) {
		return p.errAt(at, "parameter key %q: expected a lower-case letter then a-z, 0-9 and -, e.g. min-rooms", key)
	}
	t, ok := typeMap[typ]
	if !ok {
		return p.errAt(at, "parameter type %q: expected %s", typ, typeNames)
	}
	for _, q := range p.a.Params {
		if q.Key == key {
			return p.errAt(at, "parameter %q is declared twice; declare each key once", key)
		}
	}
	param := Param{Key: key, Type: t}
	if hasDef {
		if def == "" {
			return p.errAt(at, "parameter %q has an empty default, which the descriptor cannot tell from none: give a default after = or drop the =", key)
		}
		if _, err := protocol.ParseConfigValue(t, def); err != nil {
			return p.errAt(at, "default %q of parameter %q is not a valid %s: %v", def, key, typ, err)
		}
		param.Default = def
	}
	p.a.Params = append(p.a.Params, param)
	return nil
}

// setCount reads a whole number from min to 1000000 into the field.
func setCount(min int, field func(*Action) *int) func(*lineParser, string, string, int) error {
	return func(p *lineParser, flag, v string, at int) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < min || n > 1_000_000 {
			return p.errAt(at, "%s expects a whole number from %d to 1000000", flag, min)
		}
		*field(p.a) = n
		return nil
	}
}

// setDuration reads a duration of at least min (0 takes 0) into the field.
func setDuration(min time.Duration, field func(*Action) *time.Duration) func(*lineParser, string, string, int) error {
	return func(p *lineParser, flag, v string, at int) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < min {
			return p.errAt(at, "%s expects a positive duration such as 500ms, 30s or 2m", flag)
		}
		*field(p.a) = d
		return nil
	}
}

// setEffects reads --effects external|none.
func setEffects(p *lineParser, _, v string, at int) error {
	switch v {
	case "external":
		p.a.External = true
	case "none":
	default:
		return p.errAt(at, "--effects expects external (the action changes something outside) or none")
	}
	return nil
}

// setMetrics reads --metrics HOST:PORT or :PORT.
func setMetrics(p *lineParser, _, v string, at int) error {
	if _, _, err := splitHostPort(v); err != nil {
		return p.errAt(at, "--metrics expects HOST:PORT or :PORT, e.g. :9090")
	}
	p.a.Metrics = v
	return nil
}
