package sidecar

import (
	"cmp"
	"fmt"
	"strconv"
	"time"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
	"github.com/ankka-flow/millrace/internal/settings"
	"github.com/ankka-flow/millrace/protocol"
)

// This file is the sidecar's one table of settings: each default written once (the constants
// and defaultConfig), each variable with its default and meaning (Settings, the source of
// `millrace sidecar -h` and held to docs/sidecar.md's table by TestDocsSidecarSettings).
// ConfigFromEnv reads them, starting from defaultConfig; New gives a hand-built Config's zero
// fields the same defaults. A new setting is a field of Config, its default in defaultConfig,
// a row in Settings and a line in ConfigFromEnv.

// Defaults of the deploy configuration.
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
	// DefaultStateDir is where the store files are (FLOW_STATE_DIR): in Kubernetes an emptyDir,
	// so a restarted container finds them and a rescheduled pod starts clean.
	DefaultStateDir = "/tmp/millrace-state"
	// defaultStateKeepRevoked is how long a revoked partition's file is kept for a partition
	// that comes back to catch up instead of restoring (FLOW_STATE_KEEP_REVOKED).
	defaultStateKeepRevoked = 10 * time.Minute
	// CommitEveryRound as Config.CommitInterval commits after every round
	// (FLOW_COMMIT_INTERVAL=0).
	CommitEveryRound time.Duration = -1
)

// The spec's backoffs: rediscovery after a refused or unreachable process, and after a failed
// stream. They have no variable; tests and `millrace run` shorten them in Config.
var (
	defaultDiscoveryBackoff = Backoff{Initial: 500 * time.Millisecond, Max: 10 * time.Second}
	defaultFailureBackoff   = Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second}
)

// Bounds of the sizes the variables may set.
const (
	minEmitBudget      = 1 << 10
	minMaxMessageBytes = 2 * batchOverhead
	maxMaxMessageBytes = 1<<31 - 1 // gRPC's message sizes are ints of 32 bits on some platforms
)

// defaultConfig is the one table of the sidecar's defaults: the Config of a deployment that
// sets only what is required. The group (<pipeline>.<streamlet>) and the transactional id are
// derived from other settings (withDefaults).
func defaultConfig() Config {
	return Config{
		ProcessPort:       defaultProcessPort,
		SidecarPort:       defaultSidecarPort,
		ReadinessFile:     DefaultReadinessFile,
		StallWarningAfter: defaultStallWarningAfter,
		MaxMessageBytes:   DefaultMaxMessageBytes,
		ShutdownTimeout:   defaultShutdownTimeout,
		MaxBatchEmitBytes: DefaultMaxBatchEmitBytes,
		MaxHeldEmitBytes:  DefaultMaxHeldEmitBytes,
		SessionTimeout:    defaultSessionTimeout,
		CommitInterval:    DefaultCommitInterval,
		DiscoveryBackoff:  defaultDiscoveryBackoff,
		FailureBackoff:    defaultFailureBackoff,
		Delivery:          AtLeastOnce,
		Compression:       CompressionNone,
		StateDir:          DefaultStateDir,
		StateKeepRevoked:  defaultStateKeepRevoked,
	}
}

// defaultInlet is an inlet bound to topic with the default batch limits.
func defaultInlet(port, topic string) Inlet {
	return Inlet{Port: port, Topic: topic, MaxRecords: DefaultBatchMaxRecords, MaxBytes: DefaultBatchMaxBytes}
}

// withDefaults gives the zero fields of a hand-built c the defaults of defaultConfig (the
// readiness file and the ports aside: empty writes no file, the process port is required), and
// derives the group and, in exactly-once mode, the transactional id.
func (c *Config) withDefaults() {
	d := defaultConfig()
	c.DiscoveryBackoff.Initial = cmp.Or(c.DiscoveryBackoff.Initial, d.DiscoveryBackoff.Initial)
	c.DiscoveryBackoff.Max = cmp.Or(c.DiscoveryBackoff.Max, d.DiscoveryBackoff.Max)
	c.FailureBackoff.Initial = cmp.Or(c.FailureBackoff.Initial, d.FailureBackoff.Initial)
	c.FailureBackoff.Max = cmp.Or(c.FailureBackoff.Max, d.FailureBackoff.Max)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, d.MaxMessageBytes)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, d.ShutdownTimeout)
	c.StallWarningAfter = cmp.Or(c.StallWarningAfter, d.StallWarningAfter)
	c.MaxBatchEmitBytes = cmp.Or(c.MaxBatchEmitBytes, d.MaxBatchEmitBytes)
	c.MaxHeldEmitBytes = cmp.Or(c.MaxHeldEmitBytes, d.MaxHeldEmitBytes)
	c.SessionTimeout = cmp.Or(c.SessionTimeout, d.SessionTimeout)
	c.CommitInterval = cmp.Or(c.CommitInterval, d.CommitInterval)
	c.Delivery = cmp.Or(c.Delivery, d.Delivery)
	c.Compression = cmp.Or(c.Compression, d.Compression)
	c.StateDir = cmp.Or(c.StateDir, d.StateDir)
	c.StateKeepRevoked = cmp.Or(c.StateKeepRevoked, d.StateKeepRevoked)
	if c.ConsumerGroup == "" && c.Pipeline != "" && c.Streamlet != "" {
		c.ConsumerGroup = c.Pipeline + "." + c.Streamlet
	}
	c.Inlets = append([]Inlet(nil), c.Inlets...)
	for i := range c.Inlets {
		in := &c.Inlets[i]
		di := defaultInlet(in.Port, in.Topic)
		in.MaxRecords = cmp.Or(max(in.MaxRecords, 0), di.MaxRecords)
		in.MaxBytes = cmp.Or(max(in.MaxBytes, 0), di.MaxBytes)
	}
	if c.Delivery == ExactlyOnce && c.TransactionalID == "" && c.ConsumerGroup != "" {
		c.TransactionalID = transactionalID(c.ConsumerGroup, "", hostname(), c.ProcessPort)
	}
}

// validate returns the problems of c that no single variable shows, each naming the variables
// to change: ConfigFromEnv lists them with the others, New refuses a hand-built Config for them.
func (c *Config) validate() []string {
	var ps []string
	for _, in := range c.Inlets {
		if in.MaxBytes > c.MaxMessageBytes-batchOverhead {
			ps = append(ps, fmt.Sprintf("FLOW_INLET_%s_BATCH_MAX_BYTES=%d does not leave a batch under the message limit %d (FLOW_MAX_MESSAGE_BYTES): lower it below %d", envName(in.Port), in.MaxBytes, c.MaxMessageBytes, c.MaxMessageBytes-batchOverhead))
		}
	}
	if _, err := parseDelivery(string(c.Delivery)); err != nil {
		ps = append(ps, err.Error())
	}
	return append(ps, c.validateState()...)
}

// validateState returns the problems of the state settings: a changelog bound twice, or to a
// topic the streamlet reads or writes, and a deployed descriptor that contradicts them (one
// of a later version than BaseVersion, which keeps state, with no changelog; one of
// BaseVersion with one).
func (c *Config) validateState() []string {
	var ps []string
	used := map[string]string{} // topic → what binds it
	for _, in := range c.Inlets {
		used[in.Topic] = "inlet " + in.Port + "'s topic (FLOW_INLETS)"
	}
	for _, out := range c.Outlets {
		used[out.Topic] = cmp.Or(used[out.Topic], "outlet "+out.Port+"'s topic (FLOW_OUTLETS)")
	}
	var stateful []string
	for _, in := range c.Inlets {
		if in.StateTopic == "" {
			continue
		}
		stateful = append(stateful, in.Port)
		v := protocol.StateTopicVar(in.Port)
		if other, ok := used[in.StateTopic]; ok {
			ps = append(ps, fmt.Sprintf("%s=%s is also %s: a changelog is a topic of its own (e.g. %s.%s.state)", v, in.StateTopic, other, c.ConsumerGroup, in.Port))
			continue
		}
		used[in.StateTopic] = "inlet " + in.Port + "'s changelog (" + v + ")"
	}
	if c.Deployed == nil {
		return ps
	}
	version := c.Deployed.GetProtocolVersion()
	// A malformed version is the descriptor check's problem, another major discovery's: of
	// neither is it known whether the action keeps state.
	keepsState, known := protocol.VersionKeepsState(version)
	switch {
	case !known:
	case keepsState && len(stateful) == 0:
		ps = append(ps, fmt.Sprintf("FLOW_DESCRIPTOR=%s speaks protocol %s (its action keeps state) but no FLOW_INLET_<PORT>_STATE_TOPIC is set: set one for each inlet of its --state (millrace describe prints them)", c.DescriptorPath, version))
	case !keepsState && len(stateful) > 0:
		for _, port := range stateful {
			ps = append(ps, fmt.Sprintf("%s is set but FLOW_DESCRIPTOR=%s speaks protocol %s (its action keeps no state): deploy the descriptor of an action line with --state %s, or unset the variable", protocol.StateTopicVar(port), c.DescriptorPath, version, port))
		}
	}
	return ps
}

// keepsState reports whether an inlet of the deployment keeps state.
func (c *Config) keepsState() bool {
	for _, in := range c.Inlets {
		if in.StateTopic != "" {
			return true
		}
	}
	return false
}

// Settings is every variable `millrace sidecar` reads, with its default and meaning, the Kafka
// connection's (kafkaconn.Vars, shared with `millrace replay`) among them.
var Settings = withKafkaVars([]settings.Var{
	{Name: "FLOW_BROKERS", Default: "required", Meaning: "Kafka bootstrap brokers, host:port separated by commas"},
	{Name: "FLOW_PIPELINE", Default: "required", Meaning: "the pipeline's name, sent in Start"},
	{Name: "FLOW_STREAMLET", Default: "required", Meaning: "the streamlet's name in the pipeline, sent in Start"},
	{Name: "FLOW_DESCRIPTOR", Default: "required", Meaning: "path of the deployed descriptor.json; discovery must match it"},
	{Name: "FLOW_INLETS", Default: "required for declared ports", Meaning: "inlet bindings port=topic,port=topic"},
	{Name: "FLOW_OUTLETS", Default: "required for declared ports", Meaning: "outlet bindings port=topic,port=topic"},
	{Name: "FLOW_INLET_<PORT>_BATCH_MAX_RECORDS", Default: strconv.Itoa(DefaultBatchMaxRecords), Meaning: "records per batch of one inlet (<PORT> upper case, - as _)"},
	{Name: "FLOW_INLET_<PORT>_BATCH_MAX_BYTES", Default: settings.FormatSize(DefaultBatchMaxBytes), Meaning: "bytes per batch of one inlet, a size"},
	{Name: "FLOW_INLET_<PORT>_STATE_TOPIC", Default: "—", Meaning: "the inlet's changelog topic (compacted, the inlet's partitions); set, the inlet keeps state per key"},
	{Name: "FLOW_CONFIG", Default: "{}", Meaning: "deploy-time config values, a JSON object"},
	{Name: "FLOW_CONSUMER_GROUP", Default: "<pipeline>.<streamlet>", Meaning: "the consumer group"},
	{Name: protocol.EnvProcessPort, Default: strconv.Itoa(defaultConfig().ProcessPort), Meaning: "the streamlet process's port on 127.0.0.1"},
	{Name: protocol.EnvSidecarPort, Default: strconv.Itoa(defaultConfig().SidecarPort), Meaning: "the State service, on 127.0.0.1, bound only when an inlet keeps state"},
	{Name: "FLOW_READINESS_FILE", Default: defaultConfig().ReadinessFile, Meaning: "written once a conversation is open"},
	{Name: protocol.EnvStallWarningAfter, Default: settings.FormatDuration(defaultConfig().StallWarningAfter), Meaning: "a partition failing this long gets a PartitionStalled Event"},
	{Name: "FLOW_MAX_MESSAGE_BYTES", Default: settings.FormatSize(int64(defaultConfig().MaxMessageBytes)), Meaning: "the gRPC message limit both ways, and the producer's batch cap"},
	{Name: "FLOW_SHUTDOWN_TIMEOUT", Default: settings.FormatDuration(defaultConfig().ShutdownTimeout), Meaning: "on SIGTERM, how long the process may finish its batches"},
	{Name: "FLOW_METRICS_ADDR", Default: "—", Meaning: "host:port or :port serving /metrics, /healthz and /readyz; unset, none is served"},
	{Name: "FLOW_MAX_BATCH_EMIT_BYTES", Default: settings.FormatSize(defaultConfig().MaxBatchEmitBytes), Meaning: "emits one batch may hold until its Ack; over it the partition is redelivered in halves"},
	{Name: "FLOW_MAX_HELD_EMIT_BYTES", Default: settings.FormatSize(defaultConfig().MaxHeldEmitBytes), Meaning: "emits held in all until written; past it no new batch is sent"},
	{Name: envDelivery, Default: string(defaultConfig().Delivery), Meaning: "exactly-once: each commit interval is one Kafka transaction (emits and offsets)"},
	{Name: "FLOW_COMMIT_INTERVAL", Default: settings.FormatDuration(defaultConfig().CommitInterval), Meaning: "how often confirmed offsets are committed; 0 after every round"},
	{Name: envCompression, Default: string(defaultConfig().Compression), Meaning: "the emits' record batch compression: none, gzip, snappy, lz4 or zstd"},
	{Name: "FLOW_STATE_DIR", Default: defaultConfig().StateDir, Meaning: "where the stateful inlets' store files are; an emptyDir in Kubernetes"},
	{Name: "FLOW_STATE_KEEP_REVOKED", Default: settings.FormatDuration(defaultConfig().StateKeepRevoked), Meaning: "how long a revoked partition's store file is kept in case it comes back"},
	{Name: "FLOW_SESSION_TIMEOUT", Default: settings.FormatDuration(defaultConfig().SessionTimeout), Meaning: "the consumer group session timeout"},
	{Name: "FLOW_LEAVE_GROUP_ON_SHUTDOWN", Default: strconv.FormatBool(!defaultConfig().KeepMembershipOnShutdown), Meaning: "with FLOW_POD_NAME (static membership): leave the group on SIGTERM"},
	{Name: "FLOW_POD_NAME", Default: "required in Kubernetes", Meaning: "the pod stall Events are about (downward API); the static group member id"},
	{Name: "FLOW_POD_NAMESPACE", Default: "required in Kubernetes", Meaning: "its namespace"},
	{Name: "FLOW_POD_UID", Default: "required in Kubernetes", Meaning: "its uid"},
})

// withKafkaVars inserts kafkaconn's variables before the FLOW_POD_* ones.
func withKafkaVars(own []settings.Var) []settings.Var {
	var out []settings.Var
	for _, v := range own {
		if v.Name == "FLOW_POD_NAME" {
			out = append(out, kafkaconn.Vars...)
		}
		out = append(out, v)
	}
	return out
}

// ReadinessFileFromEnv returns the readiness file FLOW_READINESS_FILE names, read through
// getenv, as ConfigFromEnv reads it: for `millrace sidecar ready-check`, which reads nothing
// else.
func ReadinessFileFromEnv(getenv func(string) string) string {
	return settings.NewReader(getenv).String("FLOW_READINESS_FILE", defaultConfig().ReadinessFile)
}
