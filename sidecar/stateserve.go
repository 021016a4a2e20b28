package sidecar

import (
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
)

// stateLink is the live conversation's State.Attach stream, once its Open was accepted.
type stateLink struct {
	stream statev1.State_AttachServer
	// limits are the ones sent in Opened, by inlet port.
	limits map[string]*statev1.InletLimits
	// maxMessageBytes is Opened.max_message_bytes: every message either way stays under it.
	maxMessageBytes int
	mu              sync.Mutex // held while sending on stream
}

// sendBatchState sends one batch's states before its Batch, split with `more` so each message
// stays under Opened.max_message_bytes (never splitting one entry). Called by the sender with
// c.sendMu held; an error fails the conversation (the caller returns it like a failed Send).
func (l *stateLink) sendBatchState(batchID uint64, entries []*statev1.Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, part := range splitEntries(batchID, entries, l.maxMessageBytes) {
		if part.err != nil {
			return part.err
		}
		msg := &statev1.SidecarMessage{Message: &statev1.SidecarMessage_BatchState{BatchState: &statev1.BatchState{
			BatchId: batchID, Entries: part.entries, More: part.more}}}
		if err := l.stream.Send(msg); err != nil {
			return streamFailed(causeUnreachable, "the process is unreachable on the State service: sending the states of batch %d: %w", batchID, err)
		}
	}
	return nil
}

// entryPart is one message's share of a batch's entries.
type entryPart struct {
	entries []*statev1.Entry
	more    bool
	err     error
}

// splitEntries cuts entries into runs whose message (batch id, entries, more) stays within
// limit bytes, in order, at least one run even with no entry. An entry too large for a message
// on its own is an error: the limits in Opened keep that from happening.
func splitEntries(batchID uint64, entries []*statev1.Entry, limit int) []entryPart {
	// The batch id's field and a set `more` are in every message.
	head := 1 + protowire.SizeVarint(batchID) + 2
	var parts []entryPart
	from, size := 0, head
	for i, e := range entries {
		n := proto.Size(e)
		n += 1 + protowire.SizeVarint(uint64(n))
		if head+n > limit {
			return append(parts, entryPart{err: streamFailed(causeMessageLarge, "the state of one key (%d bytes, key %d bytes) does not fit in one message of %d bytes (Opened.max_message_bytes) with batch %d", n, len(e.GetKey()), limit, batchID)})
		}
		if size+n > limit {
			parts = append(parts, entryPart{entries: entries[from:i:i], more: true})
			from, size = i, head
		}
		size += n
	}
	return append(parts, entryPart{entries: entries[from:len(entries):len(entries)]})
}
