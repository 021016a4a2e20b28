package sidecar

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
)

// checkKafka connects once before anything else, so that a setting the broker refuses (a
// wrong password, an unknown CA, a missing client certificate) stops the sidecar within
// seconds with an error naming the setting, instead of clients retrying it forever; then it
// checks the sidecar's permissions (permissions.go). A broker that does not answer may be
// starting: the clients retry it.
func (s *Sidecar) checkKafka(ctx context.Context) error {
	err := kafkaconn.Check(ctx, s.cfg.Brokers, kafkaconn.Settings{TLS: s.cfg.TLS, SASL: s.cfg.SASL}, kafkaconn.CheckTimeout,
		kafkaLogger(s.log.With("component", "kafka")))
	switch {
	case err == nil:
		return s.checkPermissions(ctx)
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, kafkaconn.ErrUnreachable):
		s.log.Warn("no Kafka broker answered the first connection check; going on, the clients retry",
			"brokers", strings.Join(s.cfg.Brokers, ","), "error", err)
		return nil
	}
	return fmt.Errorf("sidecar: Kafka refused the connection settings: %w", err)
}
