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

	"github.com/ankka-flow/millrace/protocol"
	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/sidecar/internal/kube"
	"github.com/ankka-flow/millrace/sidecar/kafkaconn"
)

// Defaults of the deploy configuration; the README's table of FLOW_* variables repeats them.
const (
	defaultProcessPort       = protocol.ProcessPort
	defaultSidecarPort       = protocol.SidecarPort
	DefaultBatchMaxRecords   = 100
	DefaultBatchMaxBytes     = 1 << 20
	DefaultMaxMessageBytes   = protocol.MaxMessageBytes
	DefaultReadinessFile     = "/tmp/flow-sidecar-ready"
	defaultStallWarningAfter = 5 * time.Minute
	defaultShutdownTimeout   = protocol.StopTimeout
	// DefaultMaxBatchEmitBytes holds one record of a heavy fan-out action (60 outputs of
	// 512 KiB, 30 MiB) and DefaultMaxHeldEmitBytes about two of them in all: with one batch per
	// partition in flight on top, that fan-out over 4 partitions peaks at 190–400 MiB of RSS
	// (e2e TestFanOutMemoryBounded), under a 512 MiB pod.
	DefaultMaxBatchEmitBytes = 32 << 20
	DefaultMaxHeldEmitBytes  = 64 << 20
	// defaultSessionTimeout is Kafka's own default (session.timeout.ms since 3.0): with
	// static membership it is how long a pod that is gone for good keeps its partitions.
	defaultSessionTimeout = 45 * time.Second
	// DefaultCommitInterval is how often confirmed offsets are committed (FLOW_COMMIT_INTERVAL),
	// Kafka Streams' commit.interval.ms in exactly-once mode: a round is about 100 records on a
	// busy partition, so committing each costs a request (or a transaction) per 100 records,
	// while a crash redelivers at most this long's confirmed work.
	DefaultCommitInterval = 100 * time.Millisecond
	// CommitEveryRound as Config.CommitInterval commits after every round
	// (FLOW_COMMIT_INTERVAL=0).
	CommitEveryRound time.Duration = -1
)

// batchOverhead is room kept under max message bytes for a Batch's own fields (id, inlet name,
// partition, framing), so that a batch of batch.max-bytes of records always fits.
const batchOverhead = 1024

// Config is the sidecar's deploy configuration. ConfigFromEnv builds it from FLOW_* variables;
// tests may build one by hand. A zero field takes the default [New] gives it (batch limits,
// message limit, timeouts, emit budgets, the spec's backoffs, the group); a nil Events logs
// stall warnings without posting them.
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
	ConfigValues      map[string]string
	ConsumerGroup     string
	ProcessPort       int
	SidecarPort       int // reserved for a later minor version; never bound
	ReadinessFile     string
	StallWarningAfter time.Duration
	MaxMessageBytes   int
	ShutdownTimeout   time.Duration
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
	// (500 ms doubling to 10 s, and 500 ms doubling to 30 s).
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
}

// Inlet is one inlet port bound to its topic, with its batch limits.
type Inlet struct {
	Port       string
	Topic      string
	MaxRecords int
	MaxBytes   int
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

// configError lists every problem found in the deploy configuration, one per line.
type configError struct {
	Problems []string
}

func (e *configError) Error() string {
	return "sidecar: bad deploy configuration (fix these environment variables):\n  " + strings.Join(e.Problems, "\n  ")
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
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	c := &Config{}

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
	if len(c.Brokers) == 0 && strings.TrimSpace(getenv("FLOW_BROKERS")) == "" {
		bad("FLOW_BROKERS is missing: set it to the Kafka bootstrap brokers, host:port separated by commas")
	}
	c.Pipeline = strings.TrimSpace(getenv("FLOW_PIPELINE"))
	if c.Pipeline == "" {
		bad("FLOW_PIPELINE is missing: set it to the pipeline's name")
	}
	c.Streamlet = strings.TrimSpace(getenv("FLOW_STREAMLET"))
	if c.Streamlet == "" {
		bad("FLOW_STREAMLET is missing: set it to the streamlet's name in the pipeline")
	}

	c.DescriptorPath = getenv("FLOW_DESCRIPTOR")
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
		in := Inlet{Port: port, Topic: inTopics[port], MaxRecords: DefaultBatchMaxRecords, MaxBytes: DefaultBatchMaxBytes}
		env := "FLOW_INLET_" + envName(port) + "_BATCH_MAX_RECORDS"
		if s := getenv(env); s != "" {
			if n, err := strconv.Atoi(strings.TrimSpace(s)); err != nil || n < 1 {
				bad("%s=%s is not a whole number of records of at least 1", env, s)
			} else {
				in.MaxRecords = n
			}
		}
		env = "FLOW_INLET_" + envName(port) + "_BATCH_MAX_BYTES"
		if s := getenv(env); s != "" {
			if n, err := parseSize(s); err != nil || n < 1 {
				bad("%s=%s is not a size of at least 1 byte (write e.g. 1048576, 512Ki or 1Mi)", env, s)
			} else {
				in.MaxBytes = int(n)
			}
		}
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
	if s := strings.TrimSpace(getenv("FLOW_CONFIG")); s != "" {
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

	c.ConsumerGroup = strings.TrimSpace(getenv("FLOW_CONSUMER_GROUP"))
	if c.ConsumerGroup == "" && c.Pipeline != "" && c.Streamlet != "" {
		c.ConsumerGroup = c.Pipeline + "." + c.Streamlet
	}
	c.ProcessPort = parsePort(getenv, protocol.EnvProcessPort, defaultProcessPort, bad)
	c.SidecarPort = parsePort(getenv, protocol.EnvSidecarPort, defaultSidecarPort, bad)
	c.ReadinessFile = getenv("FLOW_READINESS_FILE")
	if c.ReadinessFile == "" {
		c.ReadinessFile = DefaultReadinessFile
	}
	c.StallWarningAfter = parseDuration(getenv, protocol.EnvStallWarningAfter, defaultStallWarningAfter, bad)
	c.ShutdownTimeout = parseDuration(getenv, "FLOW_SHUTDOWN_TIMEOUT", defaultShutdownTimeout, bad)
	c.MaxMessageBytes = DefaultMaxMessageBytes
	if s := getenv("FLOW_MAX_MESSAGE_BYTES"); s != "" {
		if n, err := parseSize(s); err != nil || n < 2*batchOverhead || n > 1<<31-1 {
			bad("FLOW_MAX_MESSAGE_BYTES=%s is not a size between %d bytes and 2Gi (write e.g. 4Mi)", s, 2*batchOverhead)
		} else {
			c.MaxMessageBytes = int(n)
		}
	}
	c.MaxBatchEmitBytes = parseBudget(getenv, "FLOW_MAX_BATCH_EMIT_BYTES", DefaultMaxBatchEmitBytes, bad)
	c.MaxHeldEmitBytes = parseBudget(getenv, "FLOW_MAX_HELD_EMIT_BYTES", DefaultMaxHeldEmitBytes, bad)
	c.InstanceID = strings.TrimSpace(getenv("FLOW_POD_NAME"))
	c.SessionTimeout = parseDuration(getenv, "FLOW_SESSION_TIMEOUT", defaultSessionTimeout, bad)
	c.CommitInterval = parseCommitInterval(getenv, bad)
	if v := strings.TrimSpace(getenv("FLOW_LEAVE_GROUP_ON_SHUTDOWN")); v != "" {
		if leave, err := strconv.ParseBool(v); err != nil {
			bad("FLOW_LEAVE_GROUP_ON_SHUTDOWN=%s is neither true nor false", v)
		} else {
			c.KeepMembershipOnShutdown = !leave
		}
	}
	for _, in := range c.Inlets {
		if in.MaxBytes > c.MaxMessageBytes-batchOverhead {
			bad("FLOW_INLET_%s_BATCH_MAX_BYTES=%d does not leave a batch under the message limit %d (FLOW_MAX_MESSAGE_BYTES): lower it below %d", envName(in.Port), in.MaxBytes, c.MaxMessageBytes, c.MaxMessageBytes-batchOverhead)
		}
	}

	if d, err := parseDelivery(getenv(envDelivery)); err != nil {
		bad("%v", err)
	} else {
		c.Delivery = d
	}
	if comp, err := parseCompression(getenv(envCompression)); err != nil {
		bad("%v", err)
	} else {
		c.Compression = comp
	}
	if c.Delivery == ExactlyOnce && c.ConsumerGroup != "" {
		c.TransactionalID = transactionalID(c.ConsumerGroup, getenv("FLOW_POD_NAME"), hostname(), c.ProcessPort)
	}
	if s := strings.TrimSpace(getenv("FLOW_METRICS_ADDR")); s != "" {
		if _, port, err := net.SplitHostPort(s); err != nil || !validPort(port) {
			bad("FLOW_METRICS_ADDR=%s is not host:port or :port (e.g. :9101)", s)
		} else {
			c.MetricsAddr = s
		}
	}

	conn := kafkaconn.FromEnv(getenv, readFile, bad)
	c.TLS, c.SASL = conn.TLS, conn.SASL

	events, err := kube.InCluster(getenv, readFile)
	if err != nil {
		bad("%v", err)
	}
	c.Events = events

	if len(problems) > 0 {
		return nil, &configError{Problems: problems}
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

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535
}

func parsePort(getenv func(string) string, name string, def int, bad func(string, ...any)) int {
	s := strings.TrimSpace(getenv(name))
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		bad("%s=%s is not a TCP port (1 to 65535)", name, s)
		return def
	}
	return n
}

func parseDuration(getenv func(string) string, name string, def time.Duration, bad func(string, ...any)) time.Duration {
	s := strings.TrimSpace(getenv(name))
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		bad("%s=%s is not a positive duration (write e.g. 30s or 5m)", name, s)
		return def
	}
	return d
}

// parseCommitInterval reads FLOW_COMMIT_INTERVAL: a duration of 0 or more, where 0 commits
// after every round.
func parseCommitInterval(getenv func(string) string, bad func(string, ...any)) time.Duration {
	const name = "FLOW_COMMIT_INTERVAL"
	s := strings.TrimSpace(getenv(name))
	if s == "" {
		return DefaultCommitInterval
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		bad("%s=%s is not a duration of 0 or more (write e.g. 100ms or 1s; 0 commits after every round)", name, s)
		return DefaultCommitInterval
	}
	if d == 0 {
		return CommitEveryRound
	}
	return d
}

// parseBudget reads a byte budget of at least 1 KiB.
func parseBudget(getenv func(string) string, name string, def int64, bad func(string, ...any)) int64 {
	s := getenv(name)
	if s == "" {
		return def
	}
	n, err := parseSize(s)
	if err != nil || n < 1<<10 {
		bad("%s=%s is not a size of at least 1Ki (write e.g. 64Mi)", name, s)
		return def
	}
	return n
}

// parseSize reads a byte count in the MEMORY_SIZE grammar of config values (digits, then an
// optional k M G or Ki Mi Gi, e.g. 1048576, 512Ki, 4Mi), so one grammar serves everywhere.
func parseSize(s string) (int64, error) {
	v, err := protocol.ParseConfigValue(flowv1.ConfigType_MEMORY_SIZE, strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	return v.(int64), nil
}
