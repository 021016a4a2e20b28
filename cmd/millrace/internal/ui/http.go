package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// assets are the page, its script and its style: embedded, nothing fetched at run time.
//
//go:embed assets
var assets embed.FS

// pushEvery is the least time between two pushes of one view to one page.
const pushEvery = time.Second

// handler serves the page, each view's data (GET /api/VIEW) and its push stream
// (GET /api/VIEW?stream=1, server-sent events), and the form (POST /api/send). Push streams end
// when ctx does.
func (s *Server) handler(ctx context.Context) http.Handler {
	static, _ := fs.Sub(assets, "assets")
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(static))
	for name, build := range map[string]func(r *http.Request) any{
		"graph":   func(*http.Request) any { return s.m.graph() },
		"records": func(r *http.Request) any { return s.records(r) },
		"logs":    func(*http.Request) any { return s.m.logsOf() },
		"state": func(r *http.Request) any {
			return s.m.stateOf(r.URL.Query().Get("q"), r.URL.Query().Get("key"))
		},
	} {
		mux.HandleFunc("GET /api/"+name, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("stream") != "" {
				s.push(ctx, w, r, build)
				return
			}
			writeJSON(w, http.StatusOK, s.m.envelope(build(r)))
		})
	}
	mux.HandleFunc("POST /api/send", s.send)
	return s.guard(mux)
}

// guard refuses a request whose Host is not this server's (DNS rebinding), and a POST from
// another origin or not of JSON (a form of another site cannot send JSON without asking).
func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.sameHost(r) {
			http.Error(w, "millrace run --ui answers requests for its loopback address only", http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPost {
			ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if o := r.Header.Get("Origin"); (o != "" && o != "http://"+r.Host) || ct != "application/json" {
				writeJSON(w, http.StatusForbidden, map[string]string{"error": "the form of the page sends JSON from the page itself; nothing else may write to the run's topics"})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// push streams a view as server-sent events: at once, then whenever the model changed, at
// most once every pushEvery, until the page goes or ctx ends.
func (s *Server) push(ctx context.Context, w http.ResponseWriter, r *http.Request, build func(*http.Request) any) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	s.m.viewers.Add(1)
	defer s.m.viewers.Add(-1)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	tick := time.NewTicker(pushEvery)
	defer tick.Stop()
	sent := ^uint64(0)
	for {
		if v := s.m.version.Load(); v != sent {
			b, err := json.Marshal(s.m.envelope(build(r)))
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return
			}
			flusher.Flush()
			sent = v
		}
		select {
		case <-ctx.Done():
			return
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// sendRequest is the form: a JSON record to an input topic of the run.
type sendRequest struct {
	Topic   string   `json:"topic"`
	Key     *string  `json:"key"`
	Value   string   `json:"value"` // JSON text; empty or null: no value
	Headers []Header `json:"headers"`
}

func (q sendRequest) record() (*kgo.Record, error) {
	rec := &kgo.Record{Topic: q.Topic}
	if q.Key != nil {
		rec.Key = []byte(*q.Key)
	}
	v := strings.TrimSpace(q.Value)
	switch {
	case v == "" || v == "null":
	case !json.Valid([]byte(v)):
		return nil, errors.New("the value is not JSON: write a JSON value, e.g. {\"id\": 1} or \"text\" (quoted)")
	default:
		rec.Value = []byte(v)
	}
	for _, h := range q.Headers {
		if h.Key == "" {
			continue
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	return rec, nil
}

// send produces the form's record.
func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	var q sendRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the form's request is not {\"topic\", \"key\", \"value\", \"headers\"}: " + err.Error()})
		return
	}
	part, off, err := s.produce(r.Context(), q)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"topic": q.Topic, "partition": part, "offset": off})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
