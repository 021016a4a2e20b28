// Package schema turns records in the Confluent wire format (magic byte 0, a 4-byte big-endian
// schema id, Protobuf message indexes, then the encoded value) into JSON for a script, and the
// script's JSON back into that format, with the schemas a schema registry holds. Only the bridge
// and the local tools import it; the action protocol (stdio/...) and the Go SDK never do.
//
// # JSON mappings
//
// Avro values are written in the Avro JSON encoding of the specification: a union's non-null
// value is {"<branch type>": value} (a named type by its full name), null is null; bytes and
// fixed are strings whose code points 0-255 are the bytes ("\u00ff"); enums are their symbol;
// records are objects, arrays arrays and maps objects. Logical types are written as the type
// under them, as the specification's JSON encoding says: timestamp-millis/-micros/-nanos and
// local-timestamp-* are the number of the unit since the epoch, date the days since the epoch,
// time-millis/-micros the number of the unit since midnight, decimal its bytes (the two's
// complement unscaled value, as bytes are written), uuid the string, duration its 12 fixed
// bytes. Encoding takes the same form back; a field left out takes the schema's default, and a
// union value given bare goes to the first branch of its JSON kind.
//
// Protobuf values are written in the proto3 JSON mapping (protojson): fields by their JSON
// (lowerCamelCase) name, fields at their default left out, 64-bit integers as strings, enums
// by name, bytes in base64, the well-known types in their special forms. Encoding accepts the
// JSON names and the proto names.
//
// JSON Schema values are the JSON itself, checked against the schema both ways.
// docs/schema.md shows each mapping with examples.
//
// Avro and Protobuf values are decoded to JSON straight from their bytes with a plan made
// once per schema (avrofast.go, protofast.go); what a plan does not cover, and every error,
// goes the libraries' way, which writes the same JSON.
//
// # Schemas and the cache
//
// Decode uses the schema the record's id names (the writer's). When the Codec pins a Version or
// an ID, an Avro record written with another schema is resolved to the pinned one (fields
// added with a default are filled, removed ones dropped), so the script sees one shape.
// Schemas by id are immutable and held for ever, up to CacheSize (the oldest is dropped
// first); "the latest version of a subject" is trusted for CacheTTL, and so is the registry's
// answer that it knows no such id (a topic of foreign records does not flood it). Concurrent
// calls for one id fetch it once. A Registry is safe for concurrent use.
package schema

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// Format is the encoding of a port's values or keys.
type Format string

// The formats.
const (
	Avro       Format = "avro"
	Protobuf   Format = "protobuf"
	JSONSchema Format = "jsonschema"
)

// Strategy names the subject a port's schema is registered under.
type Strategy string

// The subject name strategies of the Confluent serializers.
const (
	TopicName       Strategy = "topic"        // "<topic>-value" / "<topic>-key"; the default ("")
	RecordName      Strategy = "record"       // "<record full name>"
	TopicRecordName Strategy = "topic-record" // "<topic>-<record full name>"
)

// Codec is what an action line declares for the values (or the keys) of one port.
type Codec struct {
	Format   Format
	Strategy Strategy // "" is TopicName
	// Record is the full name of the Avro record / Protobuf message; needed by the record
	// strategies, and picks the message of a .proto with several on encode.
	Record  string
	Subject string // an explicit subject; overrides Strategy
	Version int    // encode with this version of the subject; 0 = the latest
	ID      int    // encode with exactly this schema id; 0 = by subject/version
}

// Settings of the registry client: the bridge's settings table fills it (SettingsFromEnv).
type Settings struct {
	URLs        []string
	Username    string // basic auth
	Password    string
	BearerToken string // or a token file, read again when it changes
	TokenFile   string
	TLS         *tls.Config   // CA, client certificate; nil = system roots / plain http
	Timeout     time.Duration // per request; default 10s
	CacheSize   int           // schemas held; default 1000
	CacheTTL    time.Duration // how long "latest version of subject" is trusted; default 5m
}

// The defaults of Settings' zero fields.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultCacheSize = 1000
	DefaultCacheTTL  = 5 * time.Minute
)

// Errors of a Registry. A record's own faults are a *DataError instead.
var (
	// ErrUnavailable (errors.Is): the registry did not answer (refused, timeout, 5xx): retry
	// with backoff; the record is not the cause. A registry that refuses the credentials or
	// the TLS handshake is reported so too, the message naming the setting to fix.
	ErrUnavailable = errors.New("schema: the schema registry did not answer")
	// ErrNoSubject (errors.Is) surfaces from Encode and from a Decode with a pinned version:
	// the subject (or its pinned version) is not in the registry. It is the port's
	// configuration, not the record: register the schema or fix the action line.
	ErrNoSubject = errors.New("schema: the schema registry holds no such subject or version")
	// ErrCodec (errors.Is) surfaces from Codec.Check and from Decode and Encode when the Codec
	// itself is wrong (an unknown format or strategy, a record strategy without Record), and
	// from Encode when the schema it selects cannot be had (a pinned id the registry lacks, a
	// schema that does not compile, a Record the .proto lacks, another format).
	ErrCodec = errors.New("schema: the codec is not valid")
)

// DataError is the record's own fault, never retried (dead-letter it): no magic byte, an id
// the registry does not know (404), bytes that do not decode, a payload that does not fit the
// schema. Path is the field path ("$.address.zip", "" when none), Reason says why in words.
type DataError struct {
	Topic  string
	Key    bool
	ID     int
	Path   string
	Reason string
	Err    error
}

func (e *DataError) Error() string {
	what := "value"
	if e.Key {
		what = "key"
	}
	msg := fmt.Sprintf("schema: the %s of a record of topic %q", what, e.Topic)
	if e.ID != 0 {
		msg += fmt.Sprintf(" (schema id %d)", e.ID)
	}
	if e.Path != "" {
		msg += " at " + e.Path
	}
	msg += ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *DataError) Unwrap() error { return e.Err }

// Registry decodes and encodes records with the schemas of one schema registry. It is safe
// for concurrent use.
type Registry struct {
	cl    *sr.Client
	tr    *http.Transport // its own, so Close ends only its connections
	tls   *tls.Config     // for explaining a refused handshake
	log   *slog.Logger
	cache *cache
}

// New makes a Registry of the settings; it does not contact the registry.
func New(s Settings, log *slog.Logger) (*Registry, error) {
	if len(s.URLs) == 0 {
		return nil, fmt.Errorf("schema: no schema registry URL: set %s", envURL)
	}
	for _, u := range s.URLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil, fmt.Errorf("schema: the schema registry URL %q is not http:// or https://", u)
		}
	}
	if s.Timeout <= 0 {
		s.Timeout = DefaultTimeout
	}
	if s.CacheSize <= 0 {
		s.CacheSize = DefaultCacheSize
	}
	if s.CacheTTL <= 0 {
		s.CacheTTL = DefaultCacheTTL
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if s.TLS != nil {
		tr.TLSClientConfig = s.TLS.Clone()
	}
	opts := []sr.ClientOpt{
		sr.URLs(s.URLs...),
		sr.HTTPClient(&http.Client{Timeout: s.Timeout, Transport: tr}),
		sr.UserAgent("millrace"),
	}
	switch {
	case s.Username != "":
		opts = append(opts, sr.BasicAuth(s.Username, s.Password))
	case s.BearerToken != "":
		opts = append(opts, sr.BearerToken(s.BearerToken))
	case s.TokenFile != "":
		opts = append(opts, sr.PreReq((&tokenFile{path: s.TokenFile}).authorize))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema: the schema registry client: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry{cl: cl, tr: tr, tls: tr.TLSClientConfig, log: log, cache: newCache(s.CacheSize, s.CacheTTL, time.Now)}, nil
}

// Close ends the registry connections r keeps open between requests (keep-alive). Calls made
// after it open new ones; a Registry needs no Close to be collected.
func (r *Registry) Close() { r.tr.CloseIdleConnections() }

// header is the Confluent wire format's; it keeps no state.
var header sr.ConfluentHeader

// Decode turns the wire-format bytes of topic's value (key=false) or key into JSON: the Avro
// JSON encoding, the proto3 JSON mapping, or the JSON itself, validated (see the package doc).
// A record's own fault is a *DataError; a registry that does not answer is ErrUnavailable.
func (r *Registry) Decode(ctx context.Context, topic string, key bool, c Codec, data []byte) ([]byte, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	id, payload, err := header.DecodeID(data)
	if err != nil {
		return nil, &DataError{Topic: topic, Key: key, Reason: noMagic(data), Err: err}
	}
	w, err := r.byID(ctx, id)
	if err != nil {
		return nil, r.dataErr(topic, key, id, err)
	}
	if w.format() != c.Format {
		return nil, &DataError{Topic: topic, Key: key, ID: id, Reason: fmt.Sprintf("the schema is %s, the port declares %s: the producer used another format, or the action line names the wrong one", w.format(), c.Format)}
	}
	d := w
	if c.Format == Avro && (c.ID != 0 || c.Version != 0) {
		// The reader's schema is pinned: resolve the writer's to it.
		if d, err = r.resolved(ctx, topic, key, c, id, w); err != nil {
			return nil, r.dataErr(topic, key, id, err)
		}
	}
	out, err := d.decode(payload)
	if err != nil {
		return nil, r.dataErr(topic, key, id, err)
	}
	return out, nil
}

// Encode turns JSON into wire-format bytes with the schema c selects for topic (its ID, its
// Version of the subject, or the subject's latest). A payload that does not fit the schema is
// a *DataError; a registry that does not answer is ErrUnavailable; a subject or version the
// registry lacks is ErrNoSubject.
func (r *Registry) Encode(ctx context.Context, topic string, key bool, c Codec, json []byte) ([]byte, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	id, err := r.selectID(ctx, topic, key, c)
	if err != nil {
		return nil, err
	}
	w, err := r.byID(ctx, id)
	var f *fault
	if errors.As(err, &f) {
		// The port's own schema is missing or does not compile: its configuration, not the
		// record's fault.
		return nil, fmt.Errorf("schema: %w: encoding for topic %q: %w", ErrCodec, topic, err)
	}
	if err != nil {
		return nil, err
	}
	if w.format() != c.Format {
		return nil, fmt.Errorf("schema: %w: schema id %d for topic %q is %s, the port declares %s: fix the action line or the subject", ErrCodec, id, topic, w.format(), c.Format)
	}
	out, err := w.encode(nil, id, c.Record, json)
	if err != nil {
		return nil, r.dataErr(topic, key, id, err)
	}
	return out, nil
}

// Subject is the subject c names for topic's values or keys: c.Subject, else by the strategy.
func (c Codec) subject(topic string, key bool) string {
	if c.Subject != "" {
		return c.Subject
	}
	suffix := "-value"
	if key {
		suffix = "-key"
	}
	switch c.Strategy {
	case RecordName:
		return c.Record
	case TopicRecordName:
		return topic + "-" + c.Record
	}
	return topic + suffix
}

// Check reports what is wrong with the codec as an action line declares it, wrapping
// ErrCodec: an unknown format or strategy, a record strategy without Record, a negative
// version or id.
func (c Codec) Check() error {
	switch c.Format {
	case Avro, Protobuf, JSONSchema:
	default:
		return fmt.Errorf("%w: the format %q is not avro, protobuf or jsonschema", ErrCodec, c.Format)
	}
	switch c.Strategy {
	case "", TopicName:
	case RecordName, TopicRecordName:
		if c.Record == "" && c.Subject == "" {
			return fmt.Errorf("%w: the %s strategy needs the record's full name (e.g. com.example.Order)", ErrCodec, c.Strategy)
		}
	default:
		return fmt.Errorf("%w: the strategy %q is not topic, record or topic-record", ErrCodec, c.Strategy)
	}
	if c.Version < 0 || c.ID < 0 {
		return fmt.Errorf("%w: version %d / id %d: give a positive number, or 0 for the latest", ErrCodec, c.Version, c.ID)
	}
	if c.Version != 0 && c.ID != 0 {
		return fmt.Errorf("%w: both version %d and id %d are pinned: keep one", ErrCodec, c.Version, c.ID)
	}
	return nil
}

// noMagic says why data is not in the wire format.
func noMagic(data []byte) string {
	switch {
	case len(data) == 0:
		return "it is empty, not in the schema registry wire format (magic byte 0, 4-byte schema id, then the value): the producer did not use a registry serializer"
	case data[0] != 0:
		return fmt.Sprintf("it starts with byte 0x%02x, not the magic byte 0 of the schema registry wire format: the producer did not use a registry serializer", data[0])
	}
	return fmt.Sprintf("it is %d bytes, shorter than the 5 of the wire format's header (magic byte 0, 4-byte schema id)", len(data))
}
