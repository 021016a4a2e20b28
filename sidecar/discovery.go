package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/protocol/ankka/flow/v1/flowv1grpc"
)

// discoverTimeout bounds one Discover call, so a process that accepts connections but never
// answers is retried rather than waited on forever.
const discoverTimeout = 10 * time.Second

// discover calls Discover until the process answers (backing off 500 ms doubling to 10 s),
// checks the answer in full and returns the Start to send. Any problem is reported to the
// process in one ReportError, logged one by one, and returned wrapping ErrRefused. It returns
// ctx.Err() when ctx ends first.
func (s *Sidecar) discover(ctx context.Context) (*flowv1.Start, error) {
	client := flowv1grpc.NewDiscoveryClient(s.conn)
	b := s.newBackoff(s.cfg.DiscoveryBackoff)
	info := &flowv1.SidecarInfo{ProtocolVersion: s.version, SidecarVersion: s.cfg.SidecarVersion}
	var spec *flowv1.Spec
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, discoverTimeout)
		got, err := client.Discover(actx, info)
		cancel()
		if err == nil {
			spec = got
			break
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.metrics.discovery.WithLabelValues(discoveryUnanswered).Inc()
		wait := b.NextBackOff()
		s.log.Info("the streamlet process does not answer Discover yet; retrying", "port", s.cfg.ProcessPort, "attempt", attempt, "wait", wait, "error", err)
		if !s.sleep(ctx, wait) {
			return nil, ctx.Err()
		}
	}

	var ps protocol.Problems
	if err := protocol.CheckVersionAgainst(s.version, spec.GetProtocolVersion()); err != nil {
		ps = append(ps, protocol.Problem{Path: "protocol_version", Message: err.Error()})
	} else {
		ps = append(ps, s.stateVersionProblems(spec.GetProtocolVersion())...)
	}
	ps = append(ps, protocol.Validate(spec)...)
	for _, p := range protocol.Compare(s.cfg.Deployed.GetStreamlet(), spec.GetStreamlet()) {
		p.Message = "differs from the deployed descriptor (" + s.cfg.DescriptorPath + "): " + p.Message
		ps = append(ps, p)
	}
	configJSON, cps := protocol.ResolveConfig(spec.GetStreamlet().GetConfigParameters(), s.cfg.ConfigValues)
	ps = append(ps, cps...)
	if len(ps) > 0 {
		s.metrics.discovery.WithLabelValues(discoveryRefused).Inc()
		s.refuse(ctx, ps)
		return nil, fmt.Errorf("%w: %d problem(s):\n  %w", ErrRefused, len(ps), problemLines{ps})
	}

	s.metrics.discovery.WithLabelValues(discoveryAccepted).Inc()
	in, out := s.bindings()
	return &flowv1.Start{
		ConversationId:  newConversationID(),
		Pipeline:        s.cfg.Pipeline,
		Streamlet:       s.cfg.Streamlet,
		ConfigJson:      string(configJSON),
		Inlets:          in,
		Outlets:         out,
		MaxMessageBytes: uint32(s.cfg.MaxMessageBytes),
	}, nil
}

// stateVersionProblems are the rows of docs/state.md's version matrix that refuse a process
// whose version the sidecar accepts: one that keeps state (1.1 or a later 1.x) in a deployment
// that declares no changelog, and one that keeps none (1.0) in a deployment that declares
// some (one problem per stateful inlet). A malformed version or another major gets none: the
// version check names it.
func (s *Sidecar) stateVersionProblems(version string) protocol.Problems {
	processKeeps, known := protocol.VersionKeepsState(version)
	var ps protocol.Problems
	switch {
	case !known:
	case processKeeps && !s.cfg.keepsState():
		ps = append(ps, protocol.Problem{Path: "protocol_version", Message: fmt.Sprintf(
			"the process speaks %s and keeps state, but this deployment declares no changelog: set FLOW_INLET_<PORT>_STATE_TOPIC for each inlet of its --state (millrace describe prints them)", version)})
	case !processKeeps:
		for _, in := range s.cfg.Inlets {
			if in.StateTopic != "" {
				ps = append(ps, protocol.Problem{Path: "protocol_version", Message: fmt.Sprintf(
					"the deployment keeps state for inlet %s (%s=%s) but the process speaks %s and takes none: deploy the action with --state %s, or unset the variable",
					in.Port, protocol.StateTopicVar(in.Port), in.StateTopic, version, in.Port)})
			}
		}
	}
	return ps
}

// problemLines is the problems of a refusal as its error shows them, one per indented line,
// kept in the chain so that a caller takes them with errors.As (protocol.Problems).
type problemLines struct{ ps protocol.Problems }

func (p problemLines) Error() string { return strings.ReplaceAll(p.ps.Error(), "\n", "\n  ") }
func (p problemLines) Unwrap() error { return p.ps }

// refuse logs every problem and reports them all to the process in one ReportError, so they
// appear in the process's own log before the sidecar exits.
func (s *Sidecar) refuse(ctx context.Context, ps protocol.Problems) {
	s.refuseWith(ctx, "discovery refused the streamlet process", ps)
}

// refuseWith is refuse, logging each problem under logMsg.
func (s *Sidecar) refuseWith(ctx context.Context, logMsg string, ps protocol.Problems) {
	msg := &flowv1.Problems{}
	for _, p := range ps {
		s.log.Error(logMsg, "problem", p.String())
		msg.Problems = append(msg.Problems, &flowv1.Problem{Message: p.String()})
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), discoverTimeout)
	defer cancel()
	if _, err := flowv1grpc.NewDiscoveryClient(s.conn).ReportError(rctx, msg); err != nil {
		s.log.Warn("could not report the problems to the process", "error", err)
	}
}

// newConversationID returns a random conversation id (UUID version 4 form).
func newConversationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
