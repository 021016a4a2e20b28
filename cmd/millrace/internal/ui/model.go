package ui

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
)

// The bounds of what the page keeps (docs/ui.md, "What it keeps").
const (
	recordsPerTopic    = 200      // the last records of each topic
	linesPerStreamlet  = 500      // the last stderr lines of each streamlet
	eventsPerStreamlet = 200      // the last record and process events of each streamlet
	keysPerChangelog   = 10_000   // keys of each changelog; more are counted, not kept
	valueBytes         = 16 << 10 // of a record's value or a state shown; longer ones are cut
	lineBytes          = 2 << 10  // of a stderr line or an event's error shown
	lagWarn            = 100      // records of lag from which a streamlet shows as lagging
	fetchedKept        = 20       // source records fetched on their own (no longer among the last records)
)

// ring keeps the last n values added.
type ring[T any] struct {
	buf   []T
	next  int
	total int // added, ever
}

func newRing[T any](n int) *ring[T] { return &ring[T]{buf: make([]T, 0, n)} }

func (r *ring[T]) add(v T) {
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, v)
	} else {
		r.buf[r.next] = v
	}
	r.next = (r.next + 1) % cap(r.buf)
	r.total++
}

// all returns the values kept, oldest first.
func (r *ring[T]) all() []T {
	if len(r.buf) < cap(r.buf) {
		return slices.Clone(r.buf)
	}
	return append(slices.Clone(r.buf[r.next:]), r.buf[:r.next]...)
}

// Record is one record as the page shows it.
type Record struct {
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Time      time.Time       `json:"time"`
	Key       *string         `json:"key"`
	KeyBase64 string          `json:"keyBase64,omitempty"`
	Value     json.RawMessage `json:"value,omitempty"`       // JSON, decoded from the port's encoding where it has one
	Text      string          `json:"text,omitempty"`        // a value that is not JSON, as text
	Base64    string          `json:"valueBase64,omitempty"` // a value that is not text
	Cut       bool            `json:"cut,omitempty"`         // the value was longer than the page keeps
	Headers   []Header        `json:"headers,omitempty"`
	// Error is a dead letter's millrace-error header (or a fallback record's abstain reason),
	// Source its millrace-source-* headers as TOPIC/PARTITION/OFFSET.
	Error  string `json:"error,omitempty"`
	Source string `json:"source,omitempty"`
}

// Header is one record header; a value that is not UTF-8 is shown as Base64.
type Header struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Base64 bool   `json:"base64,omitempty"`
}

// Line is one stderr line of a streamlet's process.
type Line struct {
	Time    time.Time `json:"time"`
	PID     int       `json:"pid"`
	Record  string    `json:"record,omitempty"` // the record of its delivery, when the engine can tell
	Attempt int       `json:"attempt,omitempty"`
	Text    string    `json:"text"`
}

// Event is one bridge event of a streamlet, as the page shows it.
type Event struct {
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`
	Record   string    `json:"record,omitempty"`
	PID      int       `json:"pid,omitempty"`
	Attempts int       `json:"attempts,omitempty"`
	Error    string    `json:"error,omitempty"`
}

// stateEntry is one key's state, from its changelog.
type stateEntry struct {
	Value     json.RawMessage `json:"value"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Time      time.Time       `json:"time"`
}

// changelog is the states of one changelog, by key.
type changelog struct {
	keys    map[string]stateEntry
	dropped int // keys not kept: more than keysPerChangelog
}

// streamletLog is what one streamlet's processes said and what happened to its records.
type streamletLog struct {
	lines    *ring[Line]
	events   *ring[Event]
	abstains *ring[*kgo.Record] // its --fallback outlet's records, with their reasons
}

// model is everything the page shows, bounded. Its methods are safe for concurrent use.
type model struct {
	now     func() time.Time
	version atomic.Uint64 // bumped by every change; a push stream sends when it moved
	viewers atomic.Int32  // push streams open

	mu         sync.Mutex
	name       string
	status     string // starting, running, ended, failed
	endErr     string
	streamlets []local.StreamletInfo
	inputs     []string
	topics     map[string]*ring[*kgo.Record] // kept as read: made a Record only when shown
	counts     map[string]int64              // records of each tailed topic, by its offsets
	fetched    map[string]*kgo.Record        // source records fetched on their own, by TOPIC/PARTITION/OFFSET; nil: none there
	logs       map[string]*streamletLog
	state      map[string]*changelog
	stats      []local.StreamletStats
	prev       map[string]sample // the previous sample of each counter, for its rate
	rates      map[string]float64
	lagging    map[string]int // consecutive samples a streamlet's lag did not shrink, lag ≥ lagWarn
	sampled    time.Time
}

// sample is a counter's value at a time.
type sample struct {
	v int64
	t time.Time
}

func newModel(now func() time.Time) *model {
	return &model{now: now, status: "starting", topics: map[string]*ring[*kgo.Record]{}, counts: map[string]int64{}, fetched: map[string]*kgo.Record{}, logs: map[string]*streamletLog{},
		state: map[string]*changelog{}, prev: map[string]sample{}, rates: map[string]float64{}, lagging: map[string]int{}}
}

func (m *model) changed() { m.version.Add(1) }

func (m *model) watched() bool { return m.viewers.Load() > 0 }

func (m *model) setRun(name string, ss []local.StreamletInfo, inputs []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.name, m.streamlets, m.inputs, m.status = name, ss, inputs, "running"
	for _, s := range ss {
		m.logs[s.Name] = &streamletLog{lines: newRing[Line](linesPerStreamlet), events: newRing[Event](eventsPerStreamlet), abstains: newRing[*kgo.Record](eventsPerStreamlet)}
		for _, p := range append(slices.Clone(s.Inlets), s.Outlets...) {
			if m.topics[p.Topic] == nil {
				m.topics[p.Topic] = newRing[*kgo.Record](recordsPerTopic)
			}
			if p.Changelog != "" {
				m.topics[p.Changelog] = newRing[*kgo.Record](recordsPerTopic)
				m.state[p.Changelog] = &changelog{keys: map[string]stateEntry{}}
			}
		}
	}
	m.changed()
}

func (m *model) setEnded(err error) {
	m.mu.Lock()
	m.status = "ended"
	if err != nil {
		m.status, m.endErr = "failed", err.Error()
	}
	m.mu.Unlock()
	m.changed()
}

// event keeps a bridge event: a stderr line in its streamlet's lines, a record's or a
// process's event in its events (the others are the run's own business).
func (m *model) event(e bridge.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.logs[e.Streamlet]
	if l == nil {
		return
	}
	switch e.Kind {
	case bridge.EventStderr:
		l.lines.add(Line{Time: m.now(), PID: e.PID, Record: e.Record, Attempt: e.Attempts, Text: cut(e.Line, lineBytes)})
	case bridge.EventProcessStarted:
		return // the graph counts the processes
	default:
		ev := Event{Time: m.now(), Kind: e.Kind.String(), Record: e.Record, PID: e.PID, Attempts: e.Attempts}
		if e.Err != nil {
			ev.Error = cut(e.Err.Error(), lineBytes)
		}
		l.events.add(ev)
	}
	m.changed()
}

func cut(s string, n int) string {
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// record keeps a record of one of the run's topics: in its topic's ring, in its writer's
// abstains for a --fallback outlet, in its changelog's keys for a changelog. It is kept as read
// (the consumer hands it over): made a Record, its value checked as JSON, only when shown.
func (m *model) record(rec *kgo.Record, fallbackOf string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ring := m.topics[rec.Topic]; ring != nil {
		ring.add(rec)
	}
	if l := m.logs[fallbackOf]; l != nil {
		l.abstains.add(rec)
	}
	if c := m.state[rec.Topic]; c != nil && rec.Key != nil {
		key := string(rec.Key)
		switch _, held := c.keys[key]; {
		case rec.Value == nil: // a tombstone
			delete(c.keys, key)
		case held || len(c.keys) < keysPerChangelog:
			c.keys[key] = stateEntry{Value: rec.Value, Partition: rec.Partition, Offset: rec.Offset, Time: rec.Timestamp}
		default:
			c.dropped++
		}
	}
	m.changed()
}

// setCounts keeps the records of each tailed topic (end − start offsets, transaction markers
// included): the page reads only their last ones.
func (m *model) setCounts(counts map[string]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !maps.Equal(m.counts, counts) {
		m.counts = counts
		m.changed()
	}
}

// shown makes the records of a ring Records.
func shown(recs []*kgo.Record) []Record {
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = toRecord(r)
	}
	return out
}

// setStats keeps a sample of the streamlets' counters, and the rates since the last one.
func (m *model) setStats(st []local.StreamletStats) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	rate := func(id string, v int64) {
		if p, ok := m.prev[id]; ok && now.After(p.t) {
			m.rates[id] = float64(v-p.v) / now.Sub(p.t).Seconds()
		}
		m.prev[id] = sample{v, now}
	}
	for _, s := range st {
		for t, v := range s.Committed {
			rate("in:"+s.Name+":"+t, v)
		}
		for t, v := range s.Produced {
			rate("out:"+s.Name+":"+t, v)
		}
		lag := int64(0)
		for _, v := range s.Lag {
			lag += v
		}
		if p, ok := m.prev["lag:"+s.Name]; ok && lag >= lagWarn && lag >= p.v {
			m.lagging[s.Name]++
		} else {
			m.lagging[s.Name] = 0
		}
		m.prev["lag:"+s.Name] = sample{lag, now}
	}
	m.stats, m.sampled = st, now
	m.changed()
}

// envelope is what every view sends: the run's name and status, and the view's data.
type envelope struct {
	Name   string `json:"name"`
	Status string `json:"status"` // starting, running, ended, failed
	Error  string `json:"error,omitempty"`
	Data   any    `json:"data"`
}

func (m *model) envelope(data any) envelope {
	m.mu.Lock()
	defer m.mu.Unlock()
	return envelope{Name: m.name, Status: m.status, Error: m.endErr, Data: data}
}

// graphView is the pipeline view's data.
type graphView struct {
	Name       string             `json:"name"`
	Status     string             `json:"status"`
	Error      string             `json:"error,omitempty"`
	Sampled    time.Time          `json:"sampled"`
	Streamlets []graphStreamlet   `json:"streamlets"`
	Inputs     []string           `json:"inputs"`
	Rates      map[string]float64 `json:"rates"` // records/s by in:STREAMLET:TOPIC and out:STREAMLET:TOPIC
}

type graphStreamlet struct {
	local.StreamletInfo
	Stats  *local.StreamletStats `json:"stats,omitempty"`
	Health string                `json:"health"` // ok, lagging, stalled, down
}

func (m *model) graph() graphView {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := graphView{Sampled: m.sampled, Inputs: m.inputs, Rates: map[string]float64{}}
	for k, v := range m.rates {
		g.Rates[k] = v
	}
	for _, s := range m.streamlets {
		gs := graphStreamlet{StreamletInfo: s, Health: "ok"}
		for i := range m.stats {
			if m.stats[i].Name == s.Name {
				st := m.stats[i]
				gs.Stats = &st
			}
		}
		switch st := gs.Stats; {
		case st == nil:
		case sum(st.Stalled) > 0:
			gs.Health = "stalled"
		case m.status == "running" && !st.Live:
			gs.Health = "down"
		case m.lagging[s.Name] >= 3:
			gs.Health = "lagging"
		}
		g.Streamlets = append(g.Streamlets, gs)
	}
	return g
}

func sum[V int | int64](m map[string]V) V {
	var n V
	for _, v := range m {
		n += v
	}
	return n
}

// topicRecords is one topic of the run, for the records view.
type topicRecords struct {
	Topic  string `json:"topic"`
	Role   string `json:"role"` // input, outlet, dead-letter, fallback, changelog
	Writer string `json:"writer,omitempty"`
	Total  int64  `json:"total"` // records in the topic (a changelog's: read)
}

// recordsView is the run's topics and the last records of one of them (the first, when the
// page names none), and the record the page asked for (a dead letter's source, as
// TOPIC/PARTITION/OFFSET) when it is not among them but was fetched on its own.
type recordsView struct {
	Topics  []topicRecords `json:"topics"`
	Topic   string         `json:"topic"`
	Records []Record       `json:"records"`
	Asked   *Record        `json:"asked,omitempty"`
}

// records is the records view; missing is set when the record asked for is of the topic shown,
// neither among its last records nor fetched yet.
func (m *model) records(topic, asked string) (v recordsView, missing bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v = recordsView{Topics: m.topicList(), Records: []Record{}}
	if m.topics[topic] == nil && len(v.Topics) > 0 {
		topic = v.Topics[0].Topic
	}
	r := m.topics[topic]
	if r == nil {
		return v, false
	}
	v.Topic, v.Records = topic, shown(r.all())
	if asked == "" || !strings.HasPrefix(asked, topic+"/") || slices.ContainsFunc(v.Records, func(r Record) bool { return r.ID() == asked }) {
		return v, false
	}
	rec, tried := m.fetched[asked]
	if rec != nil {
		a := toRecord(rec)
		v.Asked = &a
	}
	return v, !tried
}

// keepFetched keeps a record fetched on its own (nil: there was none), at most fetchedKept.
func (m *model) keepFetched(id string, rec *kgo.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.fetched) >= fetchedKept {
		clear(m.fetched)
	}
	m.fetched[id] = rec
	m.changed()
}

// ID is a record's TOPIC/PARTITION/OFFSET.
func (r Record) ID() string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}

func (m *model) topicList() []topicRecords {
	var out []topicRecords
	for t, r := range m.topics {
		tr := topicRecords{Topic: t, Role: "input", Total: int64(r.total)}
		if n, ok := m.counts[t]; ok {
			tr.Total = n
		}
		if _, ok := m.state[t]; ok {
			tr.Role = "changelog"
		}
		for _, s := range m.streamlets {
			for _, p := range s.Outlets {
				if p.Topic != t {
					continue
				}
				tr.Writer = s.Name + "." + p.Name
				switch p.Name {
				case s.DeadLetter:
					tr.Role = "dead-letter"
				case s.Fallback:
					tr.Role = "fallback"
				default:
					tr.Role = "outlet"
				}
			}
		}
		out = append(out, tr)
	}
	order := map[string]int{"input": 0, "outlet": 1, "dead-letter": 2, "fallback": 3, "changelog": 4}
	slices.SortFunc(out, func(a, b topicRecords) int {
		return cmp.Or(cmp.Compare(order[a.Role], order[b.Role]), strings.Compare(a.Topic, b.Topic))
	})
	return out
}

// logsView is what each streamlet's processes said, for the logs view.
type logsView struct {
	Streamlet string               `json:"streamlet"`
	Lines     []Line               `json:"lines"`
	Events    []Event              `json:"events"`
	Abstains  []Record             `json:"abstains"`
	Metrics   []local.ActionMetric `json:"metrics"`
}

func (m *model) logsOf() []logsView {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []logsView
	for _, s := range m.streamlets {
		l := m.logs[s.Name]
		v := logsView{Streamlet: s.Name, Lines: l.lines.all(), Events: l.events.all(), Abstains: shown(l.abstains.all())}
		for _, st := range m.stats {
			if st.Name == s.Name {
				v.Metrics = st.Metrics
			}
		}
		out = append(out, v)
	}
	return out
}

// stateView is the keys of each stateful inlet matching a search, and one key's state.
type stateView struct {
	Inlets []stateInlet `json:"inlets"`
}

type stateInlet struct {
	Streamlet string      `json:"streamlet"`
	Inlet     string      `json:"inlet"`
	Changelog string      `json:"changelog"`
	Held      int         `json:"held"`    // keys held
	Dropped   int         `json:"dropped"` // keys not kept (more than the page keeps)
	Keys      []string    `json:"keys"`    // matching the search, at most maxKeysShown
	Key       string      `json:"key,omitempty"`
	State     *stateEntry `json:"state,omitempty"` // the state of Key
}

const maxKeysShown = 200

func (m *model) stateOf(search, key string) stateView {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := stateView{Inlets: []stateInlet{}}
	for _, s := range m.streamlets {
		for _, p := range s.Inlets {
			c := m.state[p.Changelog]
			if c == nil {
				continue
			}
			si := stateInlet{Streamlet: s.Name, Inlet: p.Name, Changelog: p.Changelog, Held: len(c.keys), Dropped: c.dropped, Keys: []string{}}
			for k := range c.keys {
				if strings.Contains(k, search) {
					si.Keys = append(si.Keys, k)
				}
			}
			slices.Sort(si.Keys)
			if len(si.Keys) > maxKeysShown {
				si.Keys = si.Keys[:maxKeysShown]
			}
			if e, ok := c.keys[key]; ok {
				if !json.Valid(e.Value) { // a changelog holds JSON states; anything else as text
					e.Value, _ = json.Marshal(string(e.Value))
				}
				si.Key, si.State = key, &e
			}
			v.Inlets = append(v.Inlets, si)
		}
	}
	return v
}
