package schema

import (
	"sync"
	"time"
)

// key names a compiled codec: the writer's schema id, and the reader's id when an Avro record
// is resolved to a pinned schema (0 otherwise).
type key struct{ writer, reader int }

// entry is one codec being fetched or fetched: ready closes when c or err is set. A record's
// fault (an unknown id) is kept until expires, so a topic full of them does not hammer the
// registry; a schema compiled is kept for ever (expires is zero).
type entry struct {
	ready   chan struct{}
	c       codec
	err     error
	expires time.Time
}

// cache holds the codecs by id (for ever, up to size, the oldest dropped first) and the ids of
// subjects' latest versions (for ttl) and pinned versions. Its hit path takes a read lock and
// allocates nothing.
type cache struct {
	size int
	ttl  time.Duration
	now  func() time.Time

	mu       sync.RWMutex
	codecs   map[key]*entry
	order    []keyed // insertion order, for dropping the oldest
	latest   map[string]latestID
	versions map[subjectVersion]int
}

type keyed struct {
	k key
	e *entry
}

type latestID struct {
	id int
	at time.Time
}

type subjectVersion struct {
	subject string
	version int
}

func newCache(size int, ttl time.Duration, now func() time.Time) *cache {
	return &cache{size: size, ttl: ttl, now: now, codecs: map[key]*entry{}, latest: map[string]latestID{}, versions: map[subjectVersion]int{}}
}

// get returns k's entry; owner is true when the caller made it and must fill it (fill).
func (c *cache) get(k key) (e *entry, owner bool) {
	c.mu.RLock()
	e = c.codecs[k]
	c.mu.RUnlock()
	if e != nil && !c.expired(e) {
		return e, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e = c.codecs[k]; e != nil && !c.expired(e) {
		return e, false
	}
	e = &entry{ready: make(chan struct{})}
	c.codecs[k] = e
	c.order = append(c.order, keyed{k, e})
	for len(c.codecs) > c.size && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		if c.codecs[old.k] == old.e {
			delete(c.codecs, old.k)
		}
	}
	return e, true
}

// expired says whether a finished entry is past its time. An entry still being fetched is not.
func (c *cache) expired(e *entry) bool {
	select {
	case <-e.ready:
		return !e.expires.IsZero() && c.now().After(e.expires)
	default:
		return false
	}
}

// fill finishes e: a codec is kept, a record's fault kept for ttl, any other error (the
// registry did not answer) dropped so the next call asks again.
func (c *cache) fill(k key, e *entry, cd codec, err error, keep bool) {
	e.c, e.err = cd, err
	if err != nil && keep {
		e.expires = c.now().Add(c.ttl)
	}
	if err != nil && !keep {
		c.mu.Lock()
		if c.codecs[k] == e {
			delete(c.codecs, k)
		}
		c.mu.Unlock()
	}
	close(e.ready)
}

// latestOf returns the id of subject's latest version while it is trusted.
func (c *cache) latestOf(subject string) (int, bool) {
	c.mu.RLock()
	l, ok := c.latest[subject]
	c.mu.RUnlock()
	if !ok || c.now().Sub(l.at) >= c.ttl {
		return 0, false
	}
	return l.id, true
}

func (c *cache) setLatest(subject string, id int) {
	c.mu.Lock()
	c.latest[subject] = latestID{id: id, at: c.now()}
	c.mu.Unlock()
}

// versionOf returns the id of a subject's pinned version: versions do not change once
// registered.
func (c *cache) versionOf(subject string, version int) (int, bool) {
	c.mu.RLock()
	id, ok := c.versions[subjectVersion{subject, version}]
	c.mu.RUnlock()
	return id, ok
}

func (c *cache) setVersion(subject string, version, id int) {
	c.mu.Lock()
	c.versions[subjectVersion{subject, version}] = id
	c.mu.Unlock()
}
