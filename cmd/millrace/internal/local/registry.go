package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/internal/httpserve"
	"github.com/ankka-flow/millrace/internal/schema"
)

// SchemaDir is the folder of an action directory that holds the schemas of its encoded ports:
// schemas/PORT.avsc, .proto or .json for the values, schemas/PORT.key.EXT for the keys.
const SchemaDir = "schemas"

// schemaExt is the file extension of each format's schemas, and the registry's type of them.
var schemaExt = map[string]struct {
	ext string
	typ sr.SchemaType
}{
	actionconf.FormatAvro:       {".avsc", sr.TypeAvro},
	actionconf.FormatProtobuf:   {".proto", sr.TypeProtobuf},
	actionconf.FormatJSONSchema: {".json", sr.TypeJSON},
}

// topicCodec is how the records of one topic are encoded, as the port bound to it declares.
type topicCodec struct {
	value, key *schema.Codec
}

// localRegistry is the embedded schema registry of a run with encoded ports: srfake on a free
// loopback port, its client, and the codecs of the encoded topics.
type localRegistry struct {
	reg    *schema.Registry
	stop   func()                // ends the registry's server and waits for it; safe to call twice
	inputs map[string]topicCodec // inlet topic → codecs: input lines are encoded so
	prints map[string]topicCodec // outlet topic → codecs: printed decoded
}

// startRegistry starts the embedded registry when a streamlet of p declares an encoded port
// (nil otherwise), and registers each encoded port's schema under its subject: from
// files[PORT] or files[PORT.key] when given (millrace run --schema), else from the action
// directory's schemas/.
func startRegistry(p *actiondir.Pipeline, files map[string]string, log *slog.Logger) (*localRegistry, error) {
	encoded := false
	for _, s := range p.Streamlets {
		encoded = encoded || s.Action.Encoded()
	}
	if !encoded {
		if len(files) > 0 {
			return nil, fmt.Errorf("%w: --schema is given, and no action declares an encoded port (--decode, --encode): drop --schema or add --decode/--encode to the action line", errSchema)
		}
		return nil, nil
	}
	fake := srfake.NewRegistry()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("a loopback port for the embedded schema registry: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- httpserve.Serve(ctx, lis, fake.Handler()) }() // ended and waited for by stop
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-served; err != nil {
			log.Warn("the embedded schema registry did not stop cleanly", "error", err)
		}
	})
	lr := &localRegistry{stop: stop, inputs: map[string]topicCodec{}, prints: map[string]topicCodec{}}
	fail := func(err error) (*localRegistry, error) {
		lr.close()
		return nil, err
	}
	reg, err := schema.New(schema.Settings{URLs: []string{"http://" + lis.Addr().String()}}, log)
	if err != nil {
		return fail(fmt.Errorf("the embedded schema registry's client: %w", err))
	}
	lr.reg = reg
	seeded := &seeds{fake: fake, ids: map[int]string{}, versions: map[string]string{}, latest: map[string]string{}}
	used := map[string]bool{}
	for _, s := range p.Streamlets {
		for _, side := range []struct {
			ports []actionconf.Port
			into  map[string]topicCodec
		}{{s.Action.Inlets, lr.inputs}, {s.Action.Outlets, lr.prints}} {
			for _, port := range side.ports {
				topic := s.Bindings[port.Name]
				var tc topicCodec
				for _, k := range []struct {
					enc  actionconf.Encoding
					key  bool
					slot **schema.Codec
				}{{port.Value, false, &tc.value}, {port.Key, true, &tc.key}} {
					if !k.enc.Encoded() {
						continue
					}
					name := port.Name
					if k.key {
						name += ".key"
					}
					used[name] = true
					path, text, err := schemaText(s.Action, name, k.enc.Format, files)
					if err != nil {
						return fail(err)
					}
					refs, err := seeded.references(k.enc.Format, path, text)
					if err != nil {
						return fail(fmt.Errorf("%s port %s: %w", s.Action.Name, name, err))
					}
					if err := seeded.seed(subjectOf(topic, k.key, k.enc), k.enc, sr.Schema{Schema: text, Type: schemaExt[k.enc.Format].typ, References: refs}); err != nil {
						return fail(fmt.Errorf("%w: %s port %s: %w", errSchema, s.Action.Name, name, err))
					}
					c := &schema.Codec{Format: schema.Format(k.enc.Format), Strategy: schema.Strategy(k.enc.Strategy), Record: k.enc.Record, Subject: k.enc.Subject, Version: k.enc.Version, ID: k.enc.ID}
					if err := usable(reg, topic, k.key, *c); err != nil {
						return fail(fmt.Errorf("%w: %s port %s: %s cannot be its schema: %w; fix the file or the action line", errSchema, s.Action.Name, name, path, err))
					}
					*k.slot = c
				}
				if tc.value != nil || tc.key != nil {
					side.into[topic] = tc
				}
			}
		}
	}
	for name := range files {
		if !used[name] {
			return fail(fmt.Errorf("%w: --schema %s=…: no action declares port %s encoded (--decode/--encode %s=FORMAT)", errSchema, name, name, name))
		}
	}
	return lr, nil
}

// close stops the embedded registry's server and waits for it to end (nil: nothing to stop).
func (lr *localRegistry) close() {
	if lr != nil {
		lr.stop()
	}
}

// usable reports why the embedded registry's codec cannot use the schema c selects for topic
// (it does not compile, it lacks c's Record), before any line is read: the schema is asked to
// encode a null, and only the codec's own fault (schema.ErrCodec) counts, not the null's.
func usable(reg *schema.Registry, topic string, key bool, c schema.Codec) error {
	_, err := reg.Encode(context.Background(), topic, key, c, []byte("null"))
	if errors.Is(err, schema.ErrCodec) {
		return err
	}
	return nil
}

// schemaText reads the schema of an encoded port (PORT or PORT.key), and says where from: the
// --schema file, else the action directory's schemas/NAME.EXT.
func schemaText(a *actiondir.Action, name, format string, files map[string]string) (string, string, error) {
	ext := schemaExt[format].ext
	path, given := files[name]
	if !given {
		if a.Dir == "" {
			return "", "", fmt.Errorf("%w: %s declares port %s %s-encoded and has no action directory: give its schema with --schema %s=FILE%s", errSchema, a.Name, name, format, name, ext)
		}
		path = filepath.Join(a.Dir, SchemaDir, name+ext)
	} else if filepath.Ext(path) != ext {
		return "", "", fmt.Errorf("%w: --schema %s=%s: port %s is %s-encoded, whose schemas are %s files", errSchema, name, path, name, format, ext)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !given {
		return "", "", fmt.Errorf("%w: %s declares port %s %s-encoded and %s does not exist: put the port's schema there, or give it with --schema %s=FILE%s", errSchema, a.Name, name, format, path, name, ext)
	}
	if err != nil {
		return "", "", fmt.Errorf("%w: %s port %s: %w; make it a readable file, or give another with --schema %s=FILE%s", errSchema, a.Name, name, err, name, ext)
	}
	return path, string(b), nil
}

// subjectOf is the subject a port's schema is registered under, as the Confluent serializers
// name it.
func subjectOf(topic string, key bool, e actionconf.Encoding) string {
	part := "-value"
	if key {
		part = "-key"
	}
	switch {
	case e.Subject != "":
		return e.Subject
	case e.Strategy == actionconf.StrategyRecord:
		return e.Record
	case e.Strategy == actionconf.StrategyTopicRecord:
		return topic + "-" + e.Record
	}
	return topic + part
}

// seeds registers the schemas of a run in srfake, where a pinned id or version asks for it:
// a pipeline's ports may share a subject (one streamlet's outlet is the next one's inlet).
type seeds struct {
	fake     *srfake.Registry
	ids      map[int]string    // id → its schema text
	versions map[string]string // "subject/version" → its schema text
	latest   map[string]string // subject → the schema text its ports register unpinned
}

func (s *seeds) seed(subject string, e actionconf.Encoding, sch sr.Schema) error {
	if e.Version == 0 && e.ID == 0 {
		// Two schemas would make two versions, and which one is the latest an encoder uses
		// would depend on the order of the ports and on its client's cache.
		if text, ok := s.latest[subject]; ok && text != sch.Schema {
			return fmt.Errorf("subject %s is registered by two ports with different schemas (ports sharing a topic share its subject): give them the same schema", subject)
		}
		s.latest[subject] = sch.Schema
		if _, _, err := s.fake.RegisterSchema(subject, sch); err != nil {
			return fmt.Errorf("registering it under subject %s: %w", subject, err)
		}
		return nil
	}
	version, id := max(e.Version, 1), e.ID
	slot := fmt.Sprintf("%s/%d", subject, version)
	if text, ok := s.versions[slot]; ok {
		if text != sch.Schema {
			return fmt.Errorf("subject %s version %d is pinned by two ports with different schemas: give them the same schema", subject, version)
		}
		return nil
	}
	if id == 0 {
		id = 1000 + len(s.ids) // clear of the ids RegisterSchema hands out from 1
	}
	if text, ok := s.ids[id]; ok && text != sch.Schema {
		return fmt.Errorf("schema id %d is pinned by two ports with different schemas: give them the same schema", id)
	}
	if err := seedSafely(s.fake, subject, version, id, sch); err != nil {
		return err
	}
	s.ids[id], s.versions[slot] = sch.Schema, sch.Schema
	return nil
}

// seedSafely seeds srfake, which panics on a slot or an id already taken or a schema it
// cannot parse.
func seedSafely(fake *srfake.Registry, subject string, version, id int, sch sr.Schema) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("seeding subject %s version %d id %d: %v", subject, version, id, p)
		}
	}()
	fake.SeedSchema(subject, version, id, sch)
	return nil
}

// encodeInput encodes an input line's value (and key) for an encoded inlet's topic, as a
// producer with the Confluent serializer would; n is the line's number.
func (lr *localRegistry) encodeInput(ctx context.Context, rec *kgo.Record, n int) error {
	if err := lr.encode(ctx, rec); err != nil {
		return fmt.Errorf("%w %d: %w", errInput, n, err)
	}
	return nil
}

// encode encodes a record's value (and key) for an encoded inlet's topic (nothing for another
// topic); its error says which part does not fit which schema.
func (lr *localRegistry) encode(ctx context.Context, rec *kgo.Record) error {
	if lr == nil {
		return nil
	}
	tc, ok := lr.inputs[rec.Topic]
	if !ok {
		return nil
	}
	if tc.value != nil && len(rec.Value) > 0 {
		v, err := lr.reg.Encode(ctx, rec.Topic, false, *tc.value, rec.Value)
		if err != nil {
			return fmt.Errorf("its payload does not fit the %s schema of topic %s: %w", tc.value.Format, rec.Topic, err)
		}
		rec.Value = v
	}
	if tc.key != nil && rec.Key != nil {
		k, err := lr.reg.Encode(ctx, rec.Topic, true, *tc.key, rec.Key)
		if err != nil {
			return fmt.Errorf("its key (JSON text for an encoded key, e.g. \"key\": \"{\\\"id\\\": 1}\") does not fit the %s schema of topic %s's keys: %w", tc.key.Format, rec.Topic, err)
		}
		rec.Key = k
	}
	return nil
}

// decodeOutput decodes an output record of an encoded outlet's topic for printing, in place,
// and a dead letter or fallback record of an encoded inlet (its millrace-source-topic header),
// which is the input record unchanged; what does not decode is printed as it is (valueBase64).
func (lr *localRegistry) decodeOutput(ctx context.Context, rec *kgo.Record) {
	if lr == nil {
		return
	}
	topic := rec.Topic
	tc, ok := lr.prints[topic]
	if !ok {
		for _, h := range rec.Headers {
			if h.Key == "millrace-source-topic" {
				topic = string(h.Value)
			}
		}
		if tc, ok = lr.inputs[topic]; !ok {
			return
		}
	}
	if tc.value != nil && len(rec.Value) > 0 {
		if v, err := lr.reg.Decode(ctx, topic, false, *tc.value, rec.Value); err == nil {
			rec.Value = v
		}
	}
	if tc.key != nil && len(rec.Key) > 0 {
		if k, err := lr.reg.Decode(ctx, topic, true, *tc.key, rec.Key); err == nil {
			rec.Key = k
		}
	}
}

// registryOf is the registry a streamlet's bridge gets: the embedded one when the streamlet
// declares encoded ports.
func (lr *localRegistry) registryOf(s *actiondir.Streamlet) *schema.Registry {
	if lr == nil || !s.Action.Encoded() {
		return nil
	}
	return lr.reg
}

// ParseSchemaFlag reads one `millrace run --schema PORT[.key]=FILE` into files.
func ParseSchemaFlag(files map[string]string, v string) error {
	name, path, ok := strings.Cut(v, "=")
	port, part, dotted := strings.Cut(name, ".")
	switch {
	case !ok || path == "" || port == "":
		return fmt.Errorf("--schema %q: expected PORT=FILE or PORT.key=FILE, e.g. --schema listings=listing.avsc", v)
	case dotted && part != "key":
		return fmt.Errorf("--schema %q: after the port comes .key (its keys) or nothing (its values)", v)
	}
	if _, dup := files[name]; dup {
		return fmt.Errorf("--schema %s is given twice; give it once", name)
	}
	files[name] = path
	return nil
}

// FixtureRoundTrip is what `millrace test` passes fixture payloads and keys through for a's
// encoded ports (conformance.FixtureOptions.RoundTrip): each encoded with its port's schema
// (from files or the action directory's schemas/, as millrace run finds them) in an embedded
// registry, and decoded again. It returns nil and a no-op stop when a declares no encoded
// port.
func FixtureRoundTrip(a *actiondir.Action, files map[string]string, log *slog.Logger) (func(ctx context.Context, port string, inlet, key bool, data json.RawMessage) (json.RawMessage, error), func(), error) {
	p := actiondir.Single(a)
	lr, err := startRegistry(p, files, log)
	if err != nil || lr == nil {
		return nil, func() {}, err
	}
	bindings := p.Streamlets[0].Bindings
	rt := func(ctx context.Context, port string, inlet, key bool, data json.RawMessage) (json.RawMessage, error) {
		codecs := lr.prints
		if inlet {
			codecs = lr.inputs
		}
		topic := bindings[port]
		tc := codecs[topic]
		c := tc.value
		if key {
			c = tc.key
		}
		if c == nil || len(data) == 0 || (!key && string(data) == "null") {
			return data, nil
		}
		wire, err := lr.reg.Encode(ctx, topic, key, *c, data)
		if err != nil {
			return nil, err
		}
		return lr.reg.Decode(ctx, topic, key, *c, wire)
	}
	return rt, lr.close, nil
}
