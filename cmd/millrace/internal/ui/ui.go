// Package ui is the page of `millrace run --ui` (docs/ui.md): one page for the run, served on
// loopback, live while the run runs and browsable after it ends. It is fed by the local
// runner's typed observer (local.Observer: the run's view, its bridges' events, each stderr
// line among them) and by its own consumer of the run's topics; it keeps a bounded buffer of
// each (ring buffers per topic and per streamlet, a bounded table of keys per changelog), and
// pushes each view to the browser by server-sent events, at most once a second.
//
// Only `millrace run` imports it: neither `millrace sidecar` nor `millrace bridge` links it.
package ui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
	"github.com/ankka-flow/millrace/internal/httpserve"
)

// DefaultAddr is where the page listens without an address: a free loopback port.
const DefaultAddr = "127.0.0.1:0"

// ErrNotLoopback is New's error for an address off loopback.
var ErrNotLoopback = errors.New("the page listens on loopback only")

// Server is the page of one run. It is a local.Observer.
type Server struct {
	lis net.Listener
	log *slog.Logger
	m   *model

	mu      sync.Mutex
	view    *local.View
	feed    *feed // the readers of the run's topics, while the run runs
	ended   bool  // Ended was called: the counters are final
	started chan struct{}
}

// New listens on addr, which must be a loopback address (127.0.0.0/8, ::1 or localhost; port 0
// picks a free one). The page is served once Serve is called.
func New(addr string, log *slog.Logger) (*Server, error) {
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--ui %s: %w; pick a free port, or leave the address out for one", addr, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{lis: lis, log: log, m: newModel(time.Now), started: make(chan struct{})}, nil
}

// checkLoopback refuses an address whose host is not a loopback address: the page shows the
// run's records and produces to its topics, for the author at this machine only.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--ui=%s: %w; give HOST:PORT, e.g. --ui=127.0.0.1:8080", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	what := "host " + host
	if host == "" {
		what = "no host (every interface)"
	}
	return fmt.Errorf("--ui=%s: %w, and %s is not one: the page shows the run's records and writes to its topics, so no other machine may reach it; give 127.0.0.1:PORT, [::1]:PORT or localhost:PORT (from another machine, reach it through an SSH tunnel: ssh -L PORT:127.0.0.1:PORT)", addr, ErrNotLoopback, what)
}

// URL is the page's address.
func (s *Server) URL() string {
	return "http://" + s.lis.Addr().String() + "/"
}

// Serve serves the page until ctx ends, then stops the server (the push streams end first)
// and returns.
func (s *Server) Serve(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.sample(ctx) })
	defer wg.Wait()
	return httpserve.Serve(ctx, s.lis, s.handler(ctx))
}

// Started is local.Observer's: the run's streamlets run. It starts the page's readers of the run's topics.
func (s *Server) Started(v *local.View) {
	s.m.setRun(v.Name(), v.Streamlets(), v.InputTopics())
	f, err := startFeed(v, s.m, s.log)
	if err != nil {
		s.log.Warn("the page cannot read the run's topics; the records, state and dead letters views stay empty", "error", err)
	}
	s.mu.Lock()
	s.view, s.feed = v, f
	s.mu.Unlock()
	close(s.started)
}

// RunStarted reports whether the run's streamlets started (Started was called).
func (s *Server) RunStarted() bool {
	select {
	case <-s.started:
		return true
	default:
		return false
	}
}

// Event is local.Observer's: one bridge event.
func (s *Server) Event(e bridge.Event) { s.m.event(e) }

// Ended is local.Observer's: the streamlets stopped. It reads the topics' tails once more and
// the changelogs to their ends (bounded: the broker closes once it returns), takes the counters as the run left
// them, and keeps both for the page.
func (s *Server) Ended(err error) {
	s.mu.Lock()
	f, v := s.feed, s.view
	s.feed, s.ended = nil, true
	s.mu.Unlock()
	if f != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		f.catchUp(ctx)
		cancel()
		f.close()
	}
	if v != nil {
		s.m.setStats(v.Stats())
	}
	s.m.setEnded(err)
}

// roundTimeout bounds one round of reading the topics' tails while the run runs.
const roundTimeout = 5 * time.Second

// sample reads the topics' tails and gathers the streamlets' counters for the graph, once a
// second while the run runs and someone watches (an open page).
func (s *Server) sample(ctx context.Context) {
	select {
	case <-s.started:
	case <-ctx.Done():
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		v, f, ended := s.view, s.feed, s.ended
		s.mu.Unlock()
		switch {
		case ended: // its counters are final
		case !s.m.watched(): // nothing read, nothing gathered
		default:
			if f != nil {
				rctx, cancel := context.WithTimeout(ctx, roundTimeout)
				f.tail.round(rctx)
				cancel()
			}
			s.m.setStats(v.Stats())
		}
	}
}

// records is the records view of the topic a request names; the record it asks for (a dead
// letter's source record) when that is no longer among its topic's last records is fetched on
// its own, once, while the run runs.
func (s *Server) records(r *http.Request) recordsView {
	q := r.URL.Query()
	asked := q.Get("record")
	v, missing := s.m.records(q.Get("topic"), asked)
	s.mu.Lock()
	f := s.feed
	s.mu.Unlock()
	if !missing || f == nil {
		return v
	}
	i := strings.LastIndexByte(asked, '/')
	j := strings.LastIndexByte(asked[:max(i, 0)], '/')
	p, perr := strconv.ParseInt(asked[j+1:max(i, j+1)], 10, 32)
	off, oerr := strconv.ParseInt(asked[i+1:], 10, 64)
	if j < 0 || perr != nil || oerr != nil {
		return v // not TOPIC/PARTITION/OFFSET: no such record
	}
	ctx, cancel := context.WithTimeout(r.Context(), roundTimeout)
	rec := f.tail.one(ctx, asked[:j], int32(p), off)
	cancel()
	if r.Context().Err() == nil {
		s.m.keepFetched(asked, rec)
		v, _ = s.m.records(q.Get("topic"), asked)
	}
	return v
}

// produce sends a record from the form.
func (s *Server) produce(ctx context.Context, req sendRequest) (int32, int64, error) {
	s.mu.Lock()
	v := s.view
	s.mu.Unlock()
	if v == nil {
		return 0, 0, errors.New("the run has not started its streamlets yet: try again in a moment")
	}
	rec, err := req.record()
	if err != nil {
		return 0, 0, err
	}
	return v.Produce(ctx, rec)
}

// sameHost reports whether a request names this server as its Host (a page of another site,
// through a DNS name rebound to 127.0.0.1, names its own).
func (s *Server) sameHost(r *http.Request) bool {
	_, port, _ := net.SplitHostPort(s.lis.Addr().String())
	host, p, err := net.SplitHostPort(r.Host)
	if err != nil || p != port {
		return false
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
