package kafkaconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ankka-flow/millrace/internal/tlsconf"
)

// CheckTimeout bounds the first connection check: long enough for a TLS handshake and a SASL
// exchange across a slow network, short enough that a refused setting is named in seconds.
const CheckTimeout = 10 * time.Second

var (
	// ErrRefused: the broker refused the connection's settings; the error is a *RefusedError
	// naming the setting. Retrying cannot help.
	ErrRefused = errors.New("kafkaconn: the broker refused the connection settings")
	// ErrUnreachable: no broker answered the check in time. It may be starting: a caller may
	// go on and let the client retry.
	ErrUnreachable = errors.New("kafkaconn: no broker answered")
)

// RefusedError is a connection the broker refused, with the setting to fix.
type RefusedError struct {
	Setting string // the variable to fix, e.g. FLOW_KAFKA_SASL_PASSWORD
	Problem string // what went wrong and how to fix it, naming no secret
	Err     error  // the client's error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s: %s: %v", e.Setting, e.Problem, e.Err)
}
func (e *RefusedError) Unwrap() error        { return e.Err }
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Check connects to brokers once with the settings and the options given (a Metadata request
// to each seed, bounded by timeout), and returns nil when one answered, a *RefusedError when
// the broker refused the settings, or an error wrapping ErrUnreachable when none answered.
func Check(ctx context.Context, brokers []string, s Settings, timeout time.Duration, more ...kgo.Opt) error {
	last := &lastWrite{}
	opts := append(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DialTimeout(timeout), kgo.WithHooks(last)}, s.Opts()...), more...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafkaconn: a client of %v: %w", brokers, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = cl.Ping(ctx)
	if err == nil {
		return nil
	}
	if r := refused(err, brokers, s, last.get()); r != nil {
		return r
	}
	return fmt.Errorf("%w within %s (%s): %w", ErrUnreachable, timeout, strings.Join(brokers, ","), err)
}

// refused maps a failed check to the setting that caused it; nil when no setting is to blame
// (a broker down or unreachable).
func refused(err error, brokers []string, s Settings, lastKey int16) *RefusedError {
	r := func(setting, format string, args ...any) *RefusedError {
		return &RefusedError{Setting: setting, Problem: fmt.Sprintf(format, args...), Err: err}
	}
	mech, user, secret := "SASL", "", envPassword
	if s.SASL != nil {
		mech = s.SASL.Name()
	}
	if a, ok := s.SASL.(*Auth); ok {
		user, secret = a.User, a.Secret
	}
	if t, ok := tlsconf.Explain(err, tlsVars, s.TLS, "broker", "FLOW_BROKERS"); ok {
		return r(t.Setting, "%s", t.Problem)
	}
	var header tls.RecordHeaderError
	switch {
	case closedEarly(err) && s.SASL != nil && (lastKey == saslHandshake || lastKey == saslAuthenticate) && mech == "OAUTHBEARER":
		// A broker that closes the connection in the SASL exchange refused it without saying
		// why (as kfake does); Kafka answers SaslAuthenticationFailed.
		return r(secret, "the broker closed the connection during OAUTHBEARER authentication: put a token it accepts in the file")
	case closedEarly(err) && s.SASL != nil && (lastKey == saslHandshake || lastKey == saslAuthenticate):
		return r(secret, "the broker closed the connection during %s authentication for user %q: the user or password is wrong, or the broker does not offer %s (%s)", mech, user, mech, envMechanism)
	case errors.Is(err, kerr.SaslAuthenticationFailed) && mech == "OAUTHBEARER":
		return r(secret, "the broker refused the OAUTHBEARER token: put a valid token in the file")
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return r(secret, "the broker refused %s authentication for user %q: check %s and the password", mech, user, envUsername)
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return r(envMechanism, "the broker does not offer %s: set the mechanism its listener enables", mech)
	case errors.Is(err, kerr.IllegalSaslState):
		return r(envMechanism, "the broker does not expect SASL on this listener: unset %s, or use its SASL listener", envMechanism)
	case errors.As(err, &header):
		return r(envTLS, "the broker at %s does not speak TLS on this port: set %s=false or use its TLS listener", strings.Join(brokers, ","), envTLS)
	case s.TLS == nil && closedEarly(err):
		return r(envTLS, "the broker closed the connection at once, as a TLS or SASL listener does with a plaintext client: set %s=true (and %s if it needs SASL)", envTLS, envMechanism)
	case s.SASL == nil && closedEarly(err):
		return r(envMechanism, "the broker closed the connection at once, as a SASL listener does with a client that does not authenticate: set %s", envMechanism)
	}
	return nil
}

// closedEarly reports whether the broker accepted the connection and then closed it.
func closedEarly(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// The request keys of the SASL exchange.
const (
	saslHandshake    = 17
	saslAuthenticate = 36
)

// lastWrite remembers the key of the last request written to a broker, to tell a connection
// closed in the SASL exchange (credentials refused) from one closed earlier.
type lastWrite struct {
	mu  sync.Mutex
	key int16
}

func (h *lastWrite) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		h.mu.Lock()
		h.key = key
		h.mu.Unlock()
	}
}

func (h *lastWrite) get() int16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.key
}
