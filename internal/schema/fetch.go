package schema

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ankka-flow/millrace/internal/tlsconf"
	"github.com/twmb/franz-go/pkg/sr"
)

// codec is one compiled schema: it decodes a payload (the bytes after the schema id) to JSON
// and encodes JSON with its wire-format header. Its faults are *fault. Safe for concurrent use.
type codec interface {
	format() Format
	decode(payload []byte) ([]byte, error)
	encode(dst []byte, id int, record string, json []byte) ([]byte, error)
}

// fault is a record's own fault as a codec or a lookup finds it; the Registry makes it a
// *DataError with the topic, key and id.
type fault struct {
	path   string
	reason string
	err    error
}

func (f *fault) Error() string {
	msg := f.reason
	if f.path != "" {
		msg = f.path + ": " + msg
	}
	if f.err != nil {
		msg += ": " + f.err.Error()
	}
	return msg
}

func (f *fault) Unwrap() error { return f.err }

// dataErr makes a fault a *DataError; other errors pass as they are.
func (r *Registry) dataErr(topic string, key bool, id int, err error) error {
	var f *fault
	if !errors.As(err, &f) {
		return err
	}
	return &DataError{Topic: topic, Key: key, ID: id, Path: f.path, Reason: f.reason, Err: f.err}
}

// byID returns the codec of schema id, fetching and compiling it once however many calls
// ask at the same time. A caller whose ctx ends stops waiting; the fetch goes on for the
// others, bounded by the request timeout.
func (r *Registry) byID(ctx context.Context, id int) (codec, error) {
	return r.compiled(ctx, key{writer: id}, func(ctx context.Context) (codec, error) { return r.compile(ctx, id) })
}

// compiled returns k's codec from the cache, or makes it with build once.
func (r *Registry) compiled(ctx context.Context, k key, build func(context.Context) (codec, error)) (codec, error) {
	e, owner := r.cache.get(k)
	if owner && ctx.Err() != nil {
		// A caller already gone starts no fetch.
		r.cache.fill(k, e, nil, fmt.Errorf("%w: schema id %d: %w", ErrUnavailable, k.writer, ctx.Err()), false)
	} else if owner {
		go func() {
			var c codec
			var err error
			defer func() {
				if p := recover(); p != nil {
					// A compiler's panic on a schema it should have refused: that schema's
					// records are not decodable here, and the bridge goes on.
					c, err = nil, &fault{reason: fmt.Sprintf("schema id %d does not compile (the compiler gave up: %v)", k.writer, p)}
				}
				var f *fault
				r.cache.fill(k, e, c, err, errors.As(err, &f))
			}()
			c, err = build(context.WithoutCancel(ctx))
		}()
	}
	select {
	case <-e.ready:
		return e.c, e.err
	case <-ctx.Done():
		// Not the record's fault either: the caller stopped waiting for the registry.
		return nil, fmt.Errorf("%w: waiting for schema id %d: %w", ErrUnavailable, k.writer, ctx.Err())
	}
}

// compile fetches schema id with its references and compiles it.
func (r *Registry) compile(ctx context.Context, id int) (codec, error) {
	s, err := r.cl.SchemaByID(ctx, id)
	if err != nil {
		return nil, r.classify(err, fmt.Sprintf("schema id %d", id), &fault{reason: fmt.Sprintf("the schema registry knows no schema id %d: the record was produced against another registry, or its schema was deleted", id)})
	}
	refs, err := r.references(ctx, s.References, map[subjectVersion]bool{})
	if err != nil {
		return nil, err
	}
	var c codec
	switch s.Type {
	case sr.TypeAvro:
		c, err = compileAvro(s.Schema, refs)
	case sr.TypeProtobuf:
		c, err = compileProtobuf(id, s.Schema, refs)
	case sr.TypeJSON:
		c, err = compileJSONSchema(id, s.Schema, refs)
	default:
		err = fmt.Errorf("the schema type %v is not Avro, Protobuf or JSON", s.Type)
	}
	if err != nil {
		// The schema is immutable: a record naming it will never decode, here.
		return nil, &fault{reason: fmt.Sprintf("schema id %d does not compile", id), err: err}
	}
	r.log.Debug("schema compiled", "id", id, "type", s.Type.String(), "references", len(refs))
	return c, nil
}

// ref is a referenced schema: its name (an import path, a $ref, an Avro full name) and text.
type ref struct {
	name, text string
}

// references fetches refs and what they reference, each once, dependencies first (as Avro's
// SchemaCache wants them).
func (r *Registry) references(ctx context.Context, refs []sr.SchemaReference, seen map[subjectVersion]bool) ([]ref, error) {
	var out []ref
	for _, rf := range refs {
		sv := subjectVersion{rf.Subject, rf.Version}
		if seen[sv] {
			continue
		}
		seen[sv] = true
		s, err := r.cl.SchemaByVersion(ctx, rf.Subject, rf.Version)
		if err != nil {
			what := fmt.Sprintf("the reference %q (subject %q version %d)", rf.Name, rf.Subject, rf.Version)
			return nil, r.classify(err, what, &fault{reason: "the schema registry lacks " + what + " of the record's schema"})
		}
		deps, err := r.references(ctx, s.References, seen)
		if err != nil {
			return nil, err
		}
		out = append(append(out, deps...), ref{name: rf.Name, text: s.Schema.Schema})
	}
	return out, nil
}

// latest returns the id of subject's latest version, cached for the TTL.
func (r *Registry) latest(ctx context.Context, subject string) (int, error) {
	if id, ok := r.cache.latestOf(subject); ok {
		return id, nil
	}
	s, err := r.cl.SchemaByVersion(ctx, subject, -1)
	if err != nil {
		return 0, r.classify(err, fmt.Sprintf("the latest version of subject %q", subject), fmt.Errorf("%w: subject %q: register its schema, or name another subject in the action line", ErrNoSubject, subject))
	}
	r.cache.setLatest(subject, s.ID)
	return s.ID, nil
}

// version returns the id of subject's version.
func (r *Registry) version(ctx context.Context, subject string, version int) (int, error) {
	if id, ok := r.cache.versionOf(subject, version); ok {
		return id, nil
	}
	s, err := r.cl.SchemaByVersion(ctx, subject, version)
	if err != nil {
		return 0, r.classify(err, fmt.Sprintf("version %d of subject %q", version, subject), fmt.Errorf("%w: subject %q has no version %d: pin one it has, or 0 for the latest", ErrNoSubject, subject, version))
	}
	r.cache.setVersion(subject, version, s.ID)
	return s.ID, nil
}

// selectID is the id c pins for encoding topic's values or keys: its ID, its Version of the
// subject, or the subject's latest.
func (r *Registry) selectID(ctx context.Context, topic string, key bool, c Codec) (int, error) {
	switch {
	case c.ID != 0:
		return c.ID, nil
	case c.Version != 0:
		return r.version(ctx, c.subject(topic, key), c.Version)
	}
	return r.latest(ctx, c.subject(topic, key))
}

// resolved is the codec that decodes Avro written with schema writer (its codec w) into the
// schema c pins.
func (r *Registry) resolved(ctx context.Context, topic string, isKey bool, c Codec, writer int, w codec) (codec, error) {
	reader, err := r.selectID(ctx, topic, isKey, c)
	if err != nil || reader == writer {
		return w, err
	}
	rc, err := r.byID(ctx, reader)
	if err != nil {
		return nil, err
	}
	return r.compiled(ctx, key{writer: writer, reader: reader}, func(context.Context) (codec, error) {
		return resolveAvro(w, rc, writer, reader)
	})
}

// classify sorts a registry error: notFound for a 404, else ErrUnavailable. A registry that
// refuses the credentials or the TLS handshake, or answers anything else, has not given the
// schema either, and the record is not the cause: it is retried like a registry that does not
// answer (nothing is lost), with a message naming the setting to fix.
func (r *Registry) classify(err error, what string, notFound error) error {
	var re *sr.ResponseError
	if !errors.As(err, &re) {
		if ref, ok := tlsconf.Explain(err, tlsVars, r.tls, "schema registry", envURL); ok {
			problem := ref.Problem
			if !strings.Contains(problem, ref.Setting) {
				problem += " (" + ref.Setting + ")"
			}
			return fmt.Errorf("%w: fetching %s: %s: %w", ErrUnavailable, what, problem, err)
		}
		return fmt.Errorf("%w: fetching %s: %w", ErrUnavailable, what, err)
	}
	switch {
	case re.StatusCode == http.StatusNotFound:
		return notFound
	case re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: the schema registry refused the credentials fetching %s (HTTP %d): check %s and %s, or %s: %w", ErrUnavailable, what, re.StatusCode, envUsername, envPassword, envToken, err)
	}
	return fmt.Errorf("%w: fetching %s: HTTP %d: %w", ErrUnavailable, what, re.StatusCode, err)
}

// tokenFile sets the bearer token from a file, read again when it changes (a rotated,
// projected token is used from the next request on).
type tokenFile struct {
	path string

	mu    sync.Mutex
	mod   time.Time
	size  int64
	token string
}

func (t *tokenFile) authorize(req *http.Request) error {
	tok, err := t.read()
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return nil
}

func (t *tokenFile) read() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("schema: %s=%s: %w", envTokenFile, t.path, err)
	}
	if t.token != "" && fi.ModTime().Equal(t.mod) && fi.Size() == t.size {
		return t.token, nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("schema: %s=%s: %w", envTokenFile, t.path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("schema: %s=%s is empty", envTokenFile, t.path)
	}
	t.token, t.mod, t.size = tok, fi.ModTime(), fi.Size()
	return tok, nil
}
