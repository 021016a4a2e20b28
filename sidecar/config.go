package sidecar

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
	"github.com/ankka-flow/millrace/internal/settings"
	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar/internal/kube"
)

// batchOverhead is room kept under max message bytes for a Batch's own fields (id, inlet name,
// partition, framing), so that a batch of batch.max-bytes of records always fits.
const batchOverhead = 1024

// Config is the sidecar's deploy configuration. ConfigFromEnv builds it from FLOW_* variables;
// tests and `millrace run` may build one by hand, and then a zero field takes its default from
// the one table in settings.go (batch limits, message limit, timeouts, emit budgets, the spec's
// backoffs, the group) when New is given it; a nil Events logs stall warnings without posting
// them.
type Config struct {
	Brokers        []string
	Pipeline       string
	Streamlet      string
	DescriptorPath string
	// Deployed is the descriptor the streamlet was deployed with; discovery must match it.
	Deployed *flowv1.Spec
	// Inlets and Outlets bind every declared port to a topic, in the descriptor's order.
	Inlets  []Inlet
	Outlets []Outlet
	// ConfigValues are the deploy-time values of config parameters, as typed strings.
	ConfigValues  map[string]string
	ConsumerGroup string
	ProcessPort   int
	// SidecarPort is where the State service is served, on 127.0.0.1, when an inlet keeps
	// state (a StateTopic); otherwise it is never bound.
	SidecarPort       int
	ReadinessFile     string // written once a conversation is open; empty (by hand) writes none
	StallWarningAfter time.Duration
	// StuckAfter is how long an owned partition may hold records waiting, none with the
	// process, with no batch sent, before the watchdog logs it, counts it and fetches it again
	// (watchdog.go).
	StuckAfter      time.Duration
	MaxMessageBytes int
	ShutdownTimeout time.Duration
	// MaxBatchEmitBytes bounds the emits held for one batch until its Ack; MaxHeldEmitBytes
	// bounds those held for every batch, acknowledged or not, until written: past it no new
	// batch is sent.
	MaxBatchEmitBytes int64
	MaxHeldEmitBytes  int64
	// InstanceID, when set (FLOW_POD_NAME), makes the sidecar a static member of its group
	// (KIP-345): a restarted pod takes its partitions back at once, without a rebalance.
	InstanceID string
	// SessionTimeout is the group session timeout: how long the group waits for a member
	// that stopped heartbeating before giving its partitions to others.
	SessionTimeout time.Duration
	// CommitInterval is how often the offsets of confirmed batches are committed (in
	// exactly-once mode, how long one transaction gathers rounds); zero takes
	// DefaultCommitInterval, CommitEveryRound commits after every round.
	CommitInterval time.Duration
	// KeepMembershipOnShutdown (FLOW_LEAVE_GROUP_ON_SHUTDOWN=false) keeps a static member in
	// its group at a graceful shutdown, for a pod that comes back under the same name (a
	// StatefulSet) to move no partition; by default it leaves, so a pod that is replaced (a
	// Deployment's rolling update) hands its partitions over at once, not after the session.
	KeepMembershipOnShutdown bool
	// MetricsAddr is where /metrics, /healthz and /readyz are served (FLOW_METRICS_ADDR,
	// host:port or :port); empty serves nothing.
	MetricsAddr string
	// TLS, when non-nil, is used for every broker connection.
	TLS *tls.Config
	// SASL, when non-nil, authenticates every broker connection.
	SASL sasl.Mechanism
	// Events posts PartitionStalled warnings to the pod; nil logs them instead.
	Events *kube.Client
	// SidecarVersion goes to the process in SidecarInfo.
	SidecarVersion string
	// DiscoveryBackoff and FailureBackoff pace retries; zero fields take the spec's values
	// (defaultDiscoveryBackoff, 500 ms doubling to 10 s, and defaultFailureBackoff, 500 ms
	// doubling to 30 s).
	DiscoveryBackoff Backoff
	FailureBackoff   Backoff
	// Delivery is AtLeastOnce (the zero value) or ExactlyOnce (FLOW_DELIVERY).
	Delivery Delivery
	// TransactionalID is the exactly-once producer's id; empty takes "<group>.<host>:<process
	// port>". ConfigFromEnv sets it from FLOW_POD_NAME where set (see transactionalID).
	TransactionalID string
	// Compression is the codec of the emits' record batches (FLOW_PRODUCE_COMPRESSION); the
	// zero value is none.
	Compression Compression
	// StateDir holds the store files of the stateful inlets' partitions (FLOW_STATE_DIR).
	StateDir string
	// StateKeepRevoked is how long a revoked partition's store file is kept in case the
	// partition comes back (FLOW_STATE_KEEP_REVOKED).
	StateKeepRevoked time.Duration
}

// Inlet is one inlet port bound to its topic, with its batch limits.
type Inlet struct {
	Port       string
	Topic      string
	MaxRecords int
	MaxBytes   int
	// StateTopic is the inlet's changelog (FLOW_INLET_<PORT>_STATE_TOPIC); "": the inlet
	// keeps no state.
	StateTopic string
}

// Outlet is one outlet port bound to its topic.
type Outlet struct {
	Port  string
	Topic string
}

// Backoff is an exponential backoff: Initial doubling up to Max.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// configError lists every problem found in the deploy configuration, one per line. It names no
// side: its caller does (`millrace sidecar:` before it), so the side is said once.
type configError struct {
	Problems []string
}

func (e *configError) Error() string {
	return "bad deploy configuration (fix these environment variables):\n  " + strings.Join(e.Problems, "\n  ")
}

func (e *configError) Is(target error) bool { return target == errConfig }

// ConfigFromEnv reads the deploy configuration from the environment through getenv, reads the
// deployed descriptor and the TLS files it names, and checks everything: every bad or missing
// value is listed at once, one per line, in the error. readFile reads the
// files named by variables; nil means os.ReadFile.
func ConfigFromEnv(getenv func(string) string, readFile func(string) ([]byte, error)) (*Config, error) {
	if readFile == nil {
		readFile = os.ReadFile
	}
	r := settings.NewReader(getenv)
	bad := r.Badf
	d := defaultConfig()
	c := &d

	for _, b := range strings.Split(getenv("FLOW_BROKERS"), ",") {
		if b = strings.TrimSpace(b); b == "" {
			continue
		}
		if host, port, err := net.SplitHostPort(b); err != nil || host == "" || !validPort(port) {
			bad("FLOW_BROKERS: %q is not host:port (e.g. kafka-0.kafka:9092)", b)
			continue
		}
		c.Brokers = append(c.Brokers, b)
	}
	if _, ok := r.Lookup("FLOW_BROKERS"); !ok {
		bad("FLOW_BROKERS is missing: set it to the Kafka bootstrap brokers, host:port separated by commas")
	}
	c.Pipeline, _ = r.Lookup("FLOW_PIPELINE")
	if c.Pipeline == "" {
		bad("FLOW_PIPELINE is missing: set it to the pipeline's name")
	}
	c.Streamlet, _ = r.Lookup("FLOW_STREAMLET")
	if c.Streamlet == "" {
		bad("FLOW_STREAMLET is missing: set it to the streamlet's name in the pipeline")
	}

	c.DescriptorPath, _ = r.Lookup("FLOW_DESCRIPTOR")
	if c.DescriptorPath == "" {
		bad("FLOW_DESCRIPTOR is missing: set it to the path of the deployed descriptor.json")
	} else if data, err := readFile(c.DescriptorPath); err != nil {
		bad("FLOW_DESCRIPTOR=%s cannot be read: %v", c.DescriptorPath, err)
	} else if spec, err := protocol.UnmarshalDescriptor(data); err != nil {
		bad("FLOW_DESCRIPTOR=%s is not a valid descriptor: %v", c.DescriptorPath, err)
	} else if spec.GetStreamlet() == nil {
		bad("FLOW_DESCRIPTOR=%s describes no streamlet", c.DescriptorPath)
	} else {
		for _, p := range protocol.Validate(spec) {
			bad("FLOW_DESCRIPTOR=%s: %s", c.DescriptorPath, p.String())
		}
		c.Deployed = spec
	}

	var declaredIn, declaredOut []string
	if c.Deployed != nil {
		for _, p := range c.Deployed.GetStreamlet().GetInlets() {
			declaredIn = append(declaredIn, p.GetName())
		}
		for _, p := range c.Deployed.GetStreamlet().GetOutlets() {
			declaredOut = append(declaredOut, p.GetName())
		}
	}
	inTopics := parseBindings("FLOW_INLETS", getenv("FLOW_INLETS"), declaredIn, c.Deployed != nil, bad)
	outTopics := parseBindings("FLOW_OUTLETS", getenv("FLOW_OUTLETS"), declaredOut, c.Deployed != nil, bad)
	topicOf := map[string]string{}
	for _, port := range declaredIn {
		in := defaultInlet(port, inTopics[port])
		in.MaxRecords = r.Int("FLOW_INLET_"+envName(port)+"_BATCH_MAX_RECORDS", in.MaxRecords, 1)
		in.MaxBytes = int(r.Size("FLOW_INLET_"+envName(port)+"_BATCH_MAX_BYTES", int64(in.MaxBytes), 1, maxMaxMessageBytes))
		in.StateTopic = strings.TrimSpace(r.String(protocol.StateTopicVar(port), ""))
		if other, ok := topicOf[in.Topic]; ok && in.Topic != "" {
			bad("FLOW_INLETS binds inlets %q and %q to the same topic %q: bind each inlet to its own topic", other, port, in.Topic)
		}
		topicOf[in.Topic] = port
		c.Inlets = append(c.Inlets, in)
	}
	for _, port := range declaredOut {
		c.Outlets = append(c.Outlets, Outlet{Port: port, Topic: outTopics[port]})
	}

	c.ConfigValues = map[string]string{}
	if s, ok := r.Lookup("FLOW_CONFIG"); ok {
		values, err := parseConfigJSON(s)
		if err != nil {
			bad("FLOW_CONFIG is not a JSON object of strings, numbers and booleans (%v): write e.g. {\"min-rooms\": 2, \"mode\": \"fast\"}", err)
		}
		c.ConfigValues = values
	}
	if c.Deployed != nil {
		if _, ps := protocol.ResolveConfig(c.Deployed.GetStreamlet().GetConfigParameters(), c.ConfigValues); len(ps) > 0 {
			for _, p := range ps {
				bad("FLOW_CONFIG: %s", p.String())
			}
		}
	}

	table.Read(r, c)
	c.withDefaults()
	if c.Delivery == ExactlyOnce && c.ConsumerGroup != "" {
		c.TransactionalID = transactionalID(c.ConsumerGroup, c.InstanceID, hostname(), c.ProcessPort)
	}

	conn := kafkaconn.FromEnv(getenv, readFile, bad)
	c.TLS, c.SASL = conn.TLS, conn.SASL

	events, err := kube.InCluster(getenv, readFile)
	if err != nil {
		bad("%v", err)
	}
	c.Events = events

	for _, p := range c.validate() {
		bad("%s", p)
	}
	if ps := r.Problems(); len(ps) > 0 {
		return nil, &configError{Problems: ps}
	}
	return c, nil
}

// envName is a port name as it appears inside a variable name: upper case, '-' as '_'.
func envName(port string) string {
	return strings.ToUpper(strings.ReplaceAll(port, "-", "_"))
}

// parseBindings reads "port=topic,port=topic" and checks that it binds exactly the declared
// ports (when the descriptor is known).
func parseBindings(name, s string, declared []string, known bool, bad func(string, ...any)) map[string]string {
	m := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		port, topic, ok := strings.Cut(item, "=")
		port, topic = strings.TrimSpace(port), strings.TrimSpace(topic)
		if !ok || port == "" || topic == "" {
			bad("%s: %q is not port=topic", name, item)
			continue
		}
		if _, dup := m[port]; dup {
			bad("%s binds port %q twice", name, port)
		}
		m[port] = topic
	}
	if !known {
		return m
	}
	isDeclared := map[string]bool{}
	for _, p := range declared {
		isDeclared[p] = true
		if _, ok := m[p]; !ok {
			bad("%s does not bind declared port %q: add %s=<topic>", name, p, p)
		}
	}
	for p := range m {
		if !isDeclared[p] {
			bad("%s binds %q, which the descriptor does not declare (declared: %s)", name, p, strings.Join(declared, ", "))
		}
	}
	return m
}

// parseConfigJSON reads FLOW_CONFIG: a JSON object whose values are strings, numbers or
// booleans, returned as the typed strings config resolution parses.
func parseConfigJSON(s string) (map[string]string, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var raw map[string]any
	if err := d.Decode(&raw); err != nil {
		return map[string]string{}, err
	}
	if d.More() {
		return map[string]string{}, errors.New("text after the object")
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		switch v := v.(type) {
		case string:
			out[k] = v
		case json.Number:
			out[k] = v.String()
		case bool:
			out[k] = strconv.FormatBool(v)
		default:
			return map[string]string{}, fmt.Errorf("the value of %q is neither a string, a number nor a boolean", k)
		}
	}
	return out, nil
}

// validPort reports whether s is a port, by the parser the port variables use.
func validPort(s string) bool {
	_, err := settings.ParsePort(s)
	return err == nil
}
