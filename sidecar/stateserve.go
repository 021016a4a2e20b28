package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ankka-flow/millrace/internal/codec"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
	"github.com/ankka-flow/millrace/sidecar/internal/state"
)

// The State service (millrace.state.v1, protocol 1.1, docs/state.md section 3): served on
// 127.0.0.1:FLOW_SIDECAR_PORT when the deployment keeps state. A 1.1 process opens one Attach
// stream per conversation after Start and speaks first with Open; the sidecar answers Opened
// with each stateful inlet's effective limits, or Refused with every problem (and exits, as
// after a refused discovery). From then on the sidecar pushes each batch's states
// (sendBatchState) and the process answers each batch's Staged, which the receive loop here
// reassembles and checks before handing it to the join (stagedArrived).

// openTimeout is how long after Start a 1.1 process may take to open the State service.
const openTimeout = 10 * time.Second

// stateLink is the live conversation's State.Attach stream, once its Open was accepted.
type stateLink struct {
	stream statev1.State_AttachServer
	// limits are the ones sent in Opened, by inlet port.
	limits map[string]*statev1.InletLimits
	// maxMessageBytes is Opened.max_message_bytes: every message either way stays under it.
	maxMessageBytes int
	mu              sync.Mutex // held while sending on stream
	// done is set, with mu held, as the Attach handler returns: the stream is not to be used
	// after its handler returns, so a send then is refused.
	done bool
	// ttl is each inlet's InletState.ttl_ms from Open, by inlet port; absent or 0: states
	// never expire.
	ttl map[string]time.Duration
}

// sendBatchState sends one batch's states before its Batch, split with `more` so each message
// stays under Opened.max_message_bytes (never splitting one entry). Called by the sender with
// c.sendMu held; an error fails the conversation (the caller returns it like a failed Send).
func (l *stateLink) sendBatchState(batchID uint64, entries []*statev1.Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return streamFailed(causeUnreachable, "the process's State stream has ended: the states of batch %d cannot be sent", batchID)
	}
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
	// Every message has the batch id's field, a set `more`, and the BatchState's own tag and
	// length inside the SidecarMessage.
	head := 1 + protowire.SizeVarint(batchID) + 2 + 1 + protowire.SizeVarint(uint64(limit))
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

// listenState binds 127.0.0.1:FLOW_SIDECAR_PORT when an inlet keeps state (nil otherwise).
func (s *Sidecar) listenState() (net.Listener, error) {
	if !s.cfg.keepsState() {
		return nil, nil
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.cfg.SidecarPort))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sidecar: cannot serve the State service on %s (%s=%d): %w: free the port, or set %s to a free one on both containers", addr, protocol.EnvSidecarPort, s.cfg.SidecarPort, err, protocol.EnvSidecarPort)
	}
	return lis, nil
}

// serveState serves the State service on lis; the returned stop ends every stream and waits
// for the server.
func (s *Sidecar) serveState(lis net.Listener) (stop func()) {
	// The State codec decodes a Staged's entries in a few allocations for the whole message.
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(s.cfg.MaxMessageBytes), grpc.MaxSendMsgSize(s.cfg.MaxMessageBytes), codec.StateServerOption())
	statev1.RegisterStateServer(srv, stateServer{s: s})
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(lis); err != nil {
			s.log.Error("the State service stopped serving", "error", err)
		}
	}()
	s.log.Info("serving the State service", "address", lis.Addr().String())
	return func() {
		// Gracefully, so that a Refused just sent reaches the process before the sidecar
		// exits; every conversation has ended, so only a stream that never sent Open, or one
		// whose process has not yet ended it with its conversation, can hold the server, and
		// not for long: Stop cuts it off.
		stopped := make(chan struct{})
		go func() { defer close(stopped); srv.GracefulStop() }()
		t := time.NewTimer(stateStopTimeout)
		defer t.Stop()
		select {
		case <-stopped:
		case <-t.C:
			srv.Stop()
			<-stopped
		}
		<-served
	}
}

// stateStopTimeout bounds the State server's graceful stop.
const stateStopTimeout = 2 * time.Second

// stateServer is the sidecar's statev1.StateServer.
type stateServer struct {
	statev1.UnimplementedStateServer
	s *Sidecar
}

// Attach serves one process's State stream: Open, then Staged until the stream ends (which
// fails the conversation unless it is a graceful end: stateEndFailure). The handler reads the
// stream itself, so that nothing uses the stream after it returns: the conversation's end
// ends the stream through the process, which ends its State stream with its conversation (the
// sidecar ends the Run stream then); a process that does not is cut off by the server's stop.
func (srv stateServer) Attach(stream statev1.State_AttachServer) error {
	s := srv.s
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return status.Error(codes.InvalidArgument, "the first message of State.Attach is Open (the live conversation's id and the stateful inlets)")
	}
	c, link, err := s.open(stream, open)
	if err != nil || link == nil {
		return err
	}
	defer func() {
		link.mu.Lock()
		link.done = true
		link.mu.Unlock()
	}()
	s.receiveState(c, link)
	return nil
}

// open answers Open: FAILED_PRECONDITION for another conversation than the live one, Refused
// (and the conversation failed with ErrRefused) when the inlets do not match, else Opened,
// and then the conversation has its link. link is nil when the stream is to end.
func (s *Sidecar) open(stream statev1.State_AttachServer, open *statev1.Open) (*conversation, *stateLink, error) {
	s.mu.Lock()
	c := s.conv
	switch {
	case c == nil:
		s.mu.Unlock()
		return nil, nil, status.Errorf(codes.FailedPrecondition, "Open names conversation %q, but no conversation is live: open the State service after Start, with its conversation_id", open.GetConversationId())
	case c.start.GetConversationId() != open.GetConversationId():
		live := c.start.GetConversationId()
		s.mu.Unlock()
		return nil, nil, status.Errorf(codes.FailedPrecondition, "Open names conversation %q, but the live one is %q: open the State service with the conversation_id of the Start just received", open.GetConversationId(), live)
	case c.state != nil || c.attached:
		s.mu.Unlock()
		return nil, nil, status.Errorf(codes.FailedPrecondition, "conversation %q has its State stream open already: open one per conversation", open.GetConversationId())
	}
	c.attached = true
	s.mu.Unlock()

	ports := startInlets(c.start)
	changelogs := map[string]protocol.Changelog{}
	for _, in := range s.cfg.Inlets {
		if in.StateTopic != "" {
			changelogs[in.Port] = protocol.Changelog{Topic: in.StateTopic, MaxRecordBytes: s.maxRecordBytes(in.StateTopic)}
		}
	}
	var asked []protocol.OpenInlet
	for _, in := range open.GetInlets() {
		asked = append(asked, protocol.OpenInlet{Inlet: in.GetInlet(), MaxValueBytes: int(in.GetMaxValueBytes())})
	}
	opened, problems := protocol.CheckStateOpen(ports, changelogs, asked)
	if len(problems) > 0 {
		var ps protocol.Problems
		for _, p := range problems {
			ps = append(ps, protocol.Problem{Path: "Open.inlets", Message: p})
		}
		s.refuseWith(context.Background(), "the State service refused the process's Open", ps)
		err := stream.Send(&statev1.SidecarMessage{Message: &statev1.SidecarMessage_Refused{Refused: &statev1.Refused{Problems: problems}}})
		if err != nil {
			s.log.Warn("could not send Refused to the process", "error", err)
		}
		s.failConv(c, &failure{cause: causeProtocol, err: fmt.Errorf("%w: its State service's Open: %d problem(s):\n  %w", ErrRefused, len(ps), problemLines{ps})})
		return c, nil, nil
	}

	link := &stateLink{stream: stream, limits: map[string]*statev1.InletLimits{}, maxMessageBytes: s.cfg.MaxMessageBytes, ttl: map[string]time.Duration{}}
	for _, in := range open.GetInlets() {
		link.ttl[in.GetInlet()] = time.Duration(in.GetTtlMs()) * time.Millisecond
	}
	msg := &statev1.Opened{MaxMessageBytes: uint32(s.cfg.MaxMessageBytes)}
	for _, o := range opened {
		l := &statev1.InletLimits{Inlet: o.Inlet, ChangelogTopic: o.ChangelogTopic, MaxValueBytes: uint32(o.MaxValueBytes), MaxRecordBytes: uint32(o.MaxRecordBytes)}
		link.limits[o.Inlet] = l
		msg.Inlets = append(msg.Inlets, l)
	}
	if err := stream.Send(&statev1.SidecarMessage{Message: &statev1.SidecarMessage_Opened{Opened: msg}}); err != nil {
		s.failConv(c, streamFailed(causeUnreachable, "cannot send Opened on the State service: %w", err))
		return c, nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.failed.HasFired() || c.stateEnd.HasFired() {
		return c, nil, nil
	}
	c.state = link
	c.stateOpened.Fire()
	s.kickSenderLocked()
	s.log.Info("the process opened the State service", "conversation", open.GetConversationId(), "inlets", len(opened))
	return c, link, nil
}

// receiveState reads the process's Staged messages until the stream ends: a batch's messages
// are reassembled by `more`, checked against the limits sent in Opened, and handed to the join.
// A stream that breaks, or that the process ends before Stop or with a Staged outstanding,
// fails it.
func (s *Sidecar) receiveState(c *conversation, l *stateLink) {
	var (
		pending   []*statev1.Entry
		pendingID uint64
		open      bool // a batch's Staged messages have begun (more was set)
	)
	msg := new(statev1.ProcessMessage)
	for {
		err := l.stream.RecvMsg(msg)
		if err == nil && (c.stateEnd.HasFired() || c.failed.HasFired()) {
			continue // the conversation is over: read on until the process ends the stream
		}
		if err != nil {
			if c.stateEnd.HasFired() || c.failed.HasFired() {
				return
			}
			s.mu.Lock()
			if err := s.stateEndFailure(c, err); err != nil {
				c.fail(err)
			}
			s.mu.Unlock()
			return
		}
		st := msg.GetStaged()
		if st == nil {
			s.failConv(c, streamFailed(causeProtocol, "the process sent a State message that is not Staged after Open (Open is sent once, first)"))
			return
		}
		if open && st.GetBatchId() != pendingID {
			s.failConv(c, streamFailed(causeProtocol, "a Staged for batch %d came while batch %d's was incomplete (its last message had more set)", st.GetBatchId(), pendingID))
			return
		}
		if err := s.checkStaged(c, l, st, len(pending)); err != nil {
			s.failConv(c, err)
			return
		}
		pendingID, open = st.GetBatchId(), st.GetMore()
		pending = append(pending, st.GetEntries()...)
		if open {
			continue
		}
		entries := pending
		pending = nil
		if err := s.stagedArrived(c, pendingID, entries); err != nil {
			s.failConv(c, err)
			return
		}
	}
}

// checkStaged checks one Staged message's entries against the limits of its batch's inlet:
// a process that ignores Opened fails the stream before anything of the batch is written.
// before is how many entries the batch's earlier messages (more set) brought: a batch has at
// most one per key, so a process that keeps setting more cannot grow what is held for it.
func (s *Sidecar) checkStaged(c *conversation, l *stateLink, st *statev1.Staged, before int) error {
	s.mu.Lock()
	b, err := c.lookup(st.GetBatchId(), "a Staged") // a revoked batch is still in flight: the join drops it
	keys := 0
	if b != nil {
		keys = len(b.keys)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	lim := l.limits[b.p.inlet.Port]
	if lim == nil {
		return streamFailed(causeProtocol, "a Staged for batch %d of inlet %s, which keeps no state (Opened names the stateful inlets)", b.id, b.p.inlet.Port)
	}
	for _, e := range st.GetEntries() {
		k, v := len(e.GetKey()), len(e.GetValue())
		if k > state.MaxKeyBytes {
			// Opened has no key limit to send; the store cannot keep a longer key.
			return streamFailed(causeMessageLarge, "a state staged in batch %d (topic %s partition %d) has a key of %d bytes, over the %d bytes a key with state may be on changelog %s: nothing of the batch is written; keep such keys stateless",
				b.id, b.p.topic, b.p.partition, k, state.MaxKeyBytes, lim.GetChangelogTopic())
		}
		if v > int(lim.GetMaxValueBytes()) || k+v > int(lim.GetMaxRecordBytes()) {
			return streamFailed(causeMessageLarge, "a state staged in batch %d (topic %s partition %d) is over the limits sent in Opened: key %d bytes and value %d bytes, for at most %d bytes of value (max_value_bytes) and %d of key and value (max_record_bytes) on changelog %s: nothing of the batch is written; the process must fail such an item's state",
				b.id, b.p.topic, b.p.partition, k, v, lim.GetMaxValueBytes(), lim.GetMaxRecordBytes(), lim.GetChangelogTopic())
		}
	}
	if n := before + len(st.GetEntries()); n > keys {
		return streamFailed(causeProtocol, "the Staged of batch %d (topic %s partition %d) brings %d entries, more than the batch's %d distinct keys: a process stages each of its batch's keys at most once",
			b.id, b.p.topic, b.p.partition, n, keys)
	}
	return nil
}

// stateEndFailure is the failure of conversation c whose State stream ended with err (nil
// when the end is graceful). Once Stop is sent, the process ends its State stream as it
// finishes: half-closed, or canceled as it completes its Run side, whichever of the two ends
// the sidecar reads first. That end is graceful when no batch still waits for its Staged (the
// process answers a batch's Staged before its Ack); a process that goes away uncleanly breaks
// its Run stream too, which fails the conversation. Before Stop, any end fails it. Called with
// mu held.
func (s *Sidecar) stateEndFailure(c *conversation, err error) error {
	ended := errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled
	switch {
	case !c.stopping && errors.Is(err, io.EOF):
		return streamFailed(causeUnreachable, "the process closed its State stream while the conversation lives")
	case !c.stopping || !ended:
		return s.stateRecvFailure(err)
	}
	if b := c.awaitingStaged(); b != nil {
		return streamFailed(causeUnreachable, "the process ended its State stream after Stop while batch %d (topic %s partition %d) still waits for its Staged (a batch's Staged comes before its Ack): %w", b.id, b.p.topic, b.p.partition, err)
	}
	return nil
}

// awaitingStaged is a batch in flight of a stateful inlet whose Staged has not come, if any.
// Called with mu held.
func (c *conversation) awaitingStaged() *batch {
	for _, b := range c.batches {
		if b.stateful && !b.staged && !b.revoked {
			return b
		}
	}
	return nil
}

// stateRecvFailure names why reading the State stream failed.
func (s *Sidecar) stateRecvFailure(err error) error {
	if status.Code(err) == codes.ResourceExhausted {
		return streamFailed(causeMessageLarge, "the process sent a State message over the message limit of %d bytes (Opened.max_message_bytes, FLOW_MAX_MESSAGE_BYTES): %w", s.cfg.MaxMessageBytes, err)
	}
	return streamFailed(causeUnreachable, "the process's State stream broke: %w", err)
}

// watchOpen fails conversation c when the deployment keeps state and the process has not
// opened the State service within openTimeout of Start (on the sidecar's clock, s.after). It
// returns when the service is open, the conversation fails or ends, or the time is up.
func (s *Sidecar) watchOpen(c *conversation) {
	if !s.cfg.keepsState() {
		return
	}
	select {
	case <-c.stateOpened.Done():
	case <-c.failed.Done():
	case <-c.stateEnd.Done():
	case <-s.after(openTimeout):
		s.mu.Lock()
		defer s.mu.Unlock()
		if c.state == nil && !c.attached {
			c.fail(streamFailed(causeUnreachable, "the process speaks %s but did not open the State service on port %d within %v (the bridge dials 127.0.0.1:%s after Start)",
				protocol.Version, s.cfg.SidecarPort, openTimeout, protocol.EnvSidecarPort))
		}
	}
}

// startInlets are the ports of a Start's inlets.
func startInlets(start *flowv1.Start) []string {
	var out []string
	for _, in := range start.GetInlets() {
		out = append(out, in.GetPort())
	}
	return out
}
