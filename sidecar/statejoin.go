package sidecar

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
)

// The join (docs/state.md, "How state reaches the item, and how it goes back"): a batch of a
// stateful inlet is answered when both its Ack (on Run) and its Staged (on State) have
// arrived, in either order. Only then does its partition's next batch go (and see its
// states), and the batch go to the committer, its staged states as changelog records among
// its emits.

// stagedArrived takes one batch's Staged entries, reassembled and checked against the limits
// sent in Opened, and joins them with the batch's Ack. A Staged for a batch not in flight, of
// an inlet that keeps no state, a second one, or one naming a key that is not one of the
// batch's (or twice) fails the stream; one for a revoked batch is dropped. Called without mu
// held; a non-nil error fails the conversation.
func (s *Sidecar) stagedArrived(c *conversation, batchID uint64, entries []*statev1.Entry) error {
	s.mu.Lock()
	answered, err := s.joinStaged(c, batchID, entries)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if answered {
		s.sendReady(c) // its partition's next batch, at once
	}
	return nil
}

// joinStaged is stagedArrived with mu held; it reports whether the batch is now answered.
func (s *Sidecar) joinStaged(c *conversation, batchID uint64, entries []*statev1.Entry) (bool, error) {
	b, err := c.lookup(batchID, "a Staged")
	if err != nil {
		return false, err
	}
	if !b.stateful {
		return false, streamFailed(causeProtocol, "a Staged for batch %d of inlet %s, which keeps no state (its changelog variable FLOW_INLET_<PORT>_STATE_TOPIC is unset)", batchID, b.p.inlet.Port)
	}
	if b.staged {
		return false, streamFailed(causeProtocol, "a second Staged for batch %d: a batch's states come back in one Staged (split with more)", batchID)
	}
	b.staged = true
	if !b.revoked && b.p.epoch == b.epoch {
		if err := s.stage(c, b, entries); err != nil {
			return false, err
		}
	}
	if !b.acked {
		return false, nil
	}
	s.joined(c, b)
	return true, nil
}

// stage turns a batch's staged entries into its changelog records, held and budgeted with its
// emits: key the record key, value the state (none: a tombstone), partition the input's.
// Called with mu held.
func (s *Sidecar) stage(c *conversation, b *batch, entries []*statev1.Entry) error {
	seen := make(map[string]bool, len(entries))
	size := 0
	for _, e := range entries {
		name, ok := b.keys[string(e.GetKey())]
		if !ok || seen[name] {
			what := "which is not the key of any of its records"
			if ok {
				what = "twice"
			}
			return streamFailed(causeProtocol, "the Staged of batch %d (topic %s partition %d) names key %q, %s: a process stages only its batch's keys, each once",
				b.id, b.p.topic, b.p.partition, clipKey(e.GetKey()), what)
		}
		seen[name] = true
		size += len(e.GetKey()) + len(e.GetValue())
	}
	// The keys and states are copied out of the message into one buffer for the batch, so that
	// the overlay holds the states alone, not the messages they came in.
	buf := make([]byte, 0, size)
	cut := func(x []byte) []byte {
		from := len(buf)
		buf = append(buf, x...)
		return buf[from:len(buf):len(buf)]
	}
	b.state = make([]*kgo.Record, 0, len(entries))
	b.stateKeys = make([][]byte, 0, len(entries))
	b.stateNames = make([]string, 0, len(entries))
	b.stateValues = make([][]byte, 0, len(entries))
	for _, e := range entries {
		key := cut(e.GetKey()) // never nil: an empty key is a key; only keyless records have no state
		var value []byte
		if len(e.GetValue()) > 0 {
			value = cut(e.GetValue())
		}
		r := c.newRecord()
		r.Topic, r.Partition, r.Key, r.Value = b.p.inlet.StateTopic, b.p.partition, key, value
		if err := s.hold(b, r); err != nil {
			return err
		}
		b.state = append(b.state, r)
		b.stateKeys = append(b.stateKeys, key)
		b.stateNames = append(b.stateNames, b.keys[string(key)])
		b.stateValues = append(b.stateValues, value)
	}
	return nil
}

// ackArrived takes the Ack of a batch of a stateful inlet: the batch is answered when its
// Staged has arrived too. A second Ack fails the stream. Called with mu held; it reports
// whether the batch is now answered (joined).
func (s *Sidecar) ackArrived(c *conversation, b *batch) (bool, error) {
	if b.acked {
		return false, streamFailed(causeProtocol, "a second Ack for batch %d", b.id)
	}
	b.acked = true
	if !b.staged {
		return false, nil
	}
	s.joined(c, b)
	return true, nil
}

// joined answers batch b: its partition is free, and unless it was revoked it goes to the
// committer, its staged states into its partition's overlay, where its partition's next
// batch reads them. Called with mu held.
func (s *Sidecar) joined(c *conversation, b *batch) {
	s.answered(c, b)
	if b.revoked || b.p.epoch != b.epoch {
		s.drop(b)
		return
	}
	if p := b.p; len(b.stateKeys) > 0 {
		if p.overlay == nil {
			p.overlay = make(map[string]staged, len(b.stateKeys))
		}
		at := s.now().UnixMilli()
		for i, k := range b.stateNames {
			p.overlay[k] = staged{value: b.stateValues[i], b: b, at: at}
		}
	}
	s.metrics.roundTrip.Observe(s.now().Sub(b.sentAt).Seconds())
	c.acked = append(c.acked, b)
	select {
	case c.commitKick <- struct{}{}:
	default:
	}
}

// stateTTL is how long a state of inlet lives in conversation c (the Open's
// InletState.ttl_ms); 0: states never expire. Called with mu held, c.state set.
func (s *Sidecar) stateTTL(c *conversation, inlet string) time.Duration { return c.state.ttl[inlet] }

// clipKey is a key for an error message: at most 64 bytes of it.
func clipKey(k []byte) string {
	if len(k) > 64 {
		return string(k[:64]) + "…"
	}
	return string(k)
}
