package sidecar

import (
	statev1 "github.com/ankka-flow/millrace/protocol/millrace/state/v1"
)

// stagedArrived takes one batch's Staged entries, reassembled and checked against the limits
// sent in Opened. The data path that joins them with the batch's Ack is not built yet: until
// it is, a Staged fails the stream (no batch of a stateful inlet is sent meanwhile, so a
// process that sends one breaks the protocol).
func (s *Sidecar) stagedArrived(c *conversation, batchID uint64, entries []*statev1.Entry) error {
	return streamFailed(causeProtocol, "a Staged for batch %d (%d entries) arrived, but serving state is not built in this sidecar", batchID, len(entries))
}
