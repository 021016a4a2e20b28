package sidecar

import (
	"cmp"
	"fmt"
	"net"
	"time"

	"github.com/ankka-flow/millrace/internal/kafkaconn"
	"github.com/ankka-flow/millrace/internal/settings"
	"github.com/ankka-flow/millrace/protocol"
)

// This file is the sidecar's one table of settings, table: one row per variable, each with its
// default, bounds, -h line and docs text. The row sets the default (defaultConfig), gives a
// hand-built Config's zero field the default (withDefaults), reads the variable
// (ConfigFromEnv) and prints -h (Settings) and docs/sidecar.md's table
// (TestDocsSidecarSettings; `go test ./sidecar -run TestDocsSidecarSettings -update` rewrites
// it). A new setting is a field of Config and a row here. The rows read elsewhere (required
// values, bindings, an inlet's, the Kafka connection's, the pod's) are Info rows: listed, not
// read, by the table.

// Defaults of the deploy configuration.
const (
	DefaultBatchMaxRecords = 100
	DefaultBatchMaxBytes   = 1 << 20
	DefaultMaxMessageBytes = protocol.MaxMessageBytes
	DefaultReadinessFile   = "/tmp/flow-sidecar-ready"
	// DefaultMaxBatchEmitBytes holds one record of a heavy fan-out action (60 outputs of
	// 512 KiB, 30 MiB) and DefaultMaxHeldEmitBytes about two of them in all: with one batch per
	// partition in flight on top, that fan-out over 4 partitions peaks at 190–400 MiB of RSS
	// (e2e TestFanOutMemoryBounded), under a 512 MiB pod.
	DefaultMaxBatchEmitBytes = 32 << 20
	DefaultMaxHeldEmitBytes  = 64 << 20
	// DefaultCommitInterval is how often confirmed offsets are committed (FLOW_COMMIT_INTERVAL),
	// Kafka Streams' commit.interval.ms in exactly-once mode: a round is about 100 records on a
	// busy partition, so committing each costs a request (or a transaction) per 100 records,
	// while a crash redelivers at most this long's confirmed work.
	DefaultCommitInterval = 100 * time.Millisecond
	// DefaultStateDir is where the store files are (FLOW_STATE_DIR): in Kubernetes an emptyDir,
	// so a restarted container finds them and a rescheduled pod starts clean.
	DefaultStateDir = "/tmp/millrace-state"
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

// table is the sidecar's settings, in the order -h and the docs list them.
var table = withKafkaRows(settings.Table[Config]{
	settings.Info[Config]("FLOW_BROKERS", "required", "Kafka bootstrap brokers, host:port separated by commas").
		Doc("Kafka bootstrap brokers, `host:port` separated by commas"),
	settings.Info[Config]("FLOW_PIPELINE", "required", "the pipeline's name, sent in Start").
		Doc("the pipeline's name, sent in `Start`"),
	settings.Info[Config]("FLOW_STREAMLET", "required", "the streamlet's name in the pipeline, sent in Start").
		Doc("the streamlet's name in the pipeline, sent in `Start`"),
	settings.Info[Config]("FLOW_DESCRIPTOR", "required", "path of the deployed descriptor.json; discovery must match it").
		Doc("path of the deployed `descriptor.json`; discovery must match it field by field"),
	settings.Info[Config]("FLOW_INLETS", "required for declared ports", "inlet bindings port=topic,port=topic").
		Doc("inlet bindings `port=topic,port=topic`; every declared inlet exactly once, one topic per inlet"),
	settings.Info[Config]("FLOW_OUTLETS", "required for declared ports", "outlet bindings port=topic,port=topic").
		Doc("outlet bindings `port=topic,port=topic`; every declared outlet exactly once"),
	settings.Info[Config]("FLOW_INLET_<PORT>_BATCH_MAX_RECORDS", fmt.Sprint(DefaultBatchMaxRecords), "records per batch of one inlet (<PORT> upper case, - as _)").
		Doc("batch.max-records of one inlet (`<PORT>` upper case, `-` as `_`)").Code(),
	settings.Info[Config]("FLOW_INLET_<PORT>_BATCH_MAX_BYTES", settings.FormatSize(DefaultBatchMaxBytes), "bytes per batch of one inlet, a size").
		Doc("batch.max-bytes of one inlet; must stay 1 KiB under `FLOW_MAX_MESSAGE_BYTES`").Code(),
	settings.Info[Config]("FLOW_INLET_<PORT>_STATE_TOPIC", "—", "the inlet's changelog topic (compacted, the inlet's partitions); set, the inlet keeps state per key").
		Doc("the inlet's changelog topic: set, the inlet keeps state per key ([docs/state.md](state.md)). Checked at start-up (it exists, `cleanup.policy=compact` exactly, the inlet topic's partitions, `Read`, `Write`, `Describe`, `DescribeConfigs`); the deployed descriptor must then speak protocol 1.1, and without any such variable 1.0"),
	settings.Info[Config]("FLOW_CONFIG", "{}", "deploy-time config values, a JSON object").
		Doc("deploy-time config values, a JSON object: `{\"min-rooms\": 2, \"mode\": \"fast\"}`; resolved against the declared parameters (required ones must be given, unknown keys are refused)").Code(),
	settings.String("FLOW_CONSUMER_GROUP", func(c *Config) *string { return &c.ConsumerGroup }, "", "the consumer group").
		Shown("<pipeline>.<streamlet>").Code(),
	settings.Port(protocol.EnvProcessPort, func(c *Config) *int { return &c.ProcessPort }, protocol.ProcessPort, "the streamlet process's port on 127.0.0.1").
		Doc("the process's port on 127.0.0.1").KeepZero(),
	settings.Port(protocol.EnvSidecarPort, func(c *Config) *int { return &c.SidecarPort }, protocol.SidecarPort, "the State service, on 127.0.0.1, bound only when an inlet keeps state").
		Doc("the State service (protocol 1.1), on 127.0.0.1, bound at start-up only when an inlet keeps state; a port in use stops the sidecar").KeepZero(),
	settings.String("FLOW_READINESS_FILE", func(c *Config) *string { return &c.ReadinessFile }, DefaultReadinessFile, "written once a conversation is open").
		Doc("written atomically once a conversation is open; removed at start-up, on every stream failure and at shutdown").KeepZero(),
	settings.Duration(protocol.EnvStallWarningAfter, func(c *Config) *time.Duration { return &c.StallWarningAfter }, 5*time.Minute, time.Nanosecond, "a partition failing this long gets a PartitionStalled Event").
		Doc("a partition whose batches keep failing this long gets one `PartitionStalled` warning Event"),
	// Well over any healthy pause between two batches of a partition with records (a commit, a
	// write, a rebalance's hand-over, all bounded by seconds), well under an operator's lag alert.
	settings.Duration(envStuckAfter, func(c *Config) *time.Duration { return &c.StuckAfter }, 30*time.Second, time.Nanosecond, "an owned partition with records waiting and no batch sent this long is stuck: logged, counted, fetched again").
		Doc("an owned partition with records waiting, no batch in flight and none sent this long is stuck, a bug by definition: logged once with its state, counted in `millrace_sidecar_stuck_partitions_total`, and fetched again from its last commit ([watchdog.md](watchdog.md))"),
	settings.Size("FLOW_MAX_MESSAGE_BYTES", func(c *Config) *int { return &c.MaxMessageBytes }, DefaultMaxMessageBytes, minMaxMessageBytes, maxMaxMessageBytes, "the gRPC message limit both ways, and the producer's batch cap").
		Doc("the gRPC message limit both ways, and the most `Start.max_message_bytes` may be: the sidecar sends the smaller of this and what its outlet topics accept for one record (see \"Outlet limits\" below)"),
	settings.Duration("FLOW_SHUTDOWN_TIMEOUT", func(c *Config) *time.Duration { return &c.ShutdownTimeout }, protocol.StopTimeout, time.Nanosecond, "on SIGTERM, how long the process may finish its batches").
		Doc("on SIGTERM, how long to wait for the process to finish its batches after `Stop`"),
	settings.Size("FLOW_MAX_BATCH_EMIT_BYTES", func(c *Config) *int64 { return &c.MaxBatchEmitBytes }, DefaultMaxBatchEmitBytes, minEmitBudget, 0, "emits one batch may hold until its Ack; over it the partition is redelivered in halves").
		Doc("the emits one batch may hold until its `Ack` (keys, values and headers). A batch over it fails the stream, naming partition, offsets and budget, and its partition is delivered again in halves down to one record, until those offsets are committed; a single record over it stalls its partition (the log names topic, partition, offset and this setting; the stall warning follows). The default holds one record of a 60 × 512 KiB fan-out"),
	settings.Size("FLOW_MAX_HELD_EMIT_BYTES", func(c *Config) *int64 { return &c.MaxHeldEmitBytes }, DefaultMaxHeldEmitBytes, minEmitBudget, 0, "emits held in all until written; past it no new batch is sent").
		Doc("the emits held in all, acknowledged or not, until written: past it no new batch is sent until some are written (backpressure). A batch over it alone still goes through. With one batch per partition in flight on top, the sidecar holds at most this plus a batch per partition"),
	settings.Enum(envDelivery, func(c *Config) *Delivery { return &c.Delivery }, AtLeastOnce, "exactly-once: each commit interval is one Kafka transaction (emits and offsets)", parseDelivery).
		Doc("`exactly-once`: the rounds of each commit interval are one Kafka transaction (see [Exactly once](#exactly-once)); any other value is refused at start-up"),
	// 0 commits after every round: CommitEveryRound, since a zero field takes the default.
	settings.Duration("FLOW_COMMIT_INTERVAL", func(c *Config) *time.Duration { return &c.CommitInterval }, DefaultCommitInterval, 0, "how often confirmed offsets are committed; 0 after every round").
		Doc("how often the offsets of confirmed batches are committed: a commit covers every round whose emits the broker confirmed since the last one, and comes at once on a revocation, a shutdown and a stream failure (what was confirmed; never what was not), or early when confirmed records fill a partition's buffer. Emits are still written as soon as their batch is acknowledged. In exactly-once mode it is how long one transaction gathers rounds: an abort loses, and delivers again, the whole interval's work. A crash redelivers at most about this long's confirmed work. `0` commits after every round").
		Then(func(c *Config) { c.CommitInterval = cmp.Or(c.CommitInterval, CommitEveryRound) }),
	settings.Enum(envCompression, func(c *Config) *Compression { return &c.Compression }, CompressionNone, "the emits' record batch compression: none, gzip, snappy, lz4 or zstd", parseCompression).
		Doc("the compression of the record batches the sidecar writes: `none`, `gzip`, `snappy`, `lz4` or `zstd`; any other value is refused at start-up. `none` is Kafka's own producer default (`compression.type`) and librdkafka's, and what a hand-written consumer loop does: compressing costs the sidecar CPU on every record (snappy, franz-go's default, was 4–7 % of the sidecar's CPU) and pays only where the network to the brokers is the bottleneck; a topic that wants its records compressed on disk can say so itself (the topic's `compression.type`)"),
	settings.String("FLOW_STATE_DIR", func(c *Config) *string { return &c.StateDir }, DefaultStateDir, "where the stateful inlets' store files are; an emptyDir in Kubernetes").
		Doc("where the stateful inlets' store files are (one per owned partition); an `emptyDir` in Kubernetes"),
	settings.Duration("FLOW_STATE_KEEP_REVOKED", func(c *Config) *time.Duration { return &c.StateKeepRevoked }, 10*time.Minute, time.Nanosecond, "how long a revoked partition's store file is kept in case it comes back").
		Doc("how long a revoked partition's store file is kept, so a partition that comes back catches up instead of restoring"),
	// Kafka's own default (session.timeout.ms since 3.0): with static membership it is how
	// long a pod that is gone for good keeps its partitions.
	settings.Duration("FLOW_SESSION_TIMEOUT", func(c *Config) *time.Duration { return &c.SessionTimeout }, 45*time.Second, time.Nanosecond, "the consumer group session timeout").
		Doc("the consumer group session timeout (within the broker's `group.min/max.session.timeout.ms`, 6 s to 30 min by default): how long a member that stopped heartbeating keeps its partitions"),
	settings.Custom("FLOW_LEAVE_GROUP_ON_SHUTDOWN", "true", "with FLOW_POD_NAME (static membership): leave the group on SIGTERM", nil,
		func(r *settings.Reader, c *Config) {
			c.KeepMembershipOnShutdown = !r.Bool("FLOW_LEAVE_GROUP_ON_SHUTDOWN", !c.KeepMembershipOnShutdown)
		}).
		Doc("with `FLOW_POD_NAME`: whether a SIGTERMed sidecar leaves the group (a Deployment's replaced pod hands its partitions over at once). `false` keeps its static membership, for pods that come back under the same name (a StatefulSet): a rolling restart then moves no partition"),
	settings.Custom("FLOW_METRICS_ADDR", "—", "host:port or :port serving /metrics, /healthz and /readyz; unset, none is served", nil,
		func(r *settings.Reader, c *Config) {
			s, ok := r.Lookup("FLOW_METRICS_ADDR")
			if !ok {
				return
			}
			if _, port, err := net.SplitHostPort(s); err != nil || !validPort(port) {
				r.Badf("FLOW_METRICS_ADDR=%s is not host:port or :port (e.g. :9101)", s)
				return
			}
			c.MetricsAddr = s
		}).
		Doc("`host:port` or `:port` (unset: off) where `/metrics`, `/healthz` and `/readyz` are served ([observing.md](observing.md)); an address malformed or in use stops the sidecar at start-up"),
	// The Kafka connection's rows (kafkaconn.Vars, shared with `millrace replay`) go here.
	settings.String("FLOW_POD_NAME", func(c *Config) *string { return &c.InstanceID }, "", "the pod stall Events are about (downward API); the static group member id").
		Shown("required in Kubernetes").Doc("the pod the stall Events are about (downward API; the namespace falls back to the service account's). `FLOW_POD_NAME`, also outside Kubernetes, is the sidecar's static group instance id (KIP-345): a sidecar restarted in its pod (a crash, SIGKILL or OOM kill) takes its partitions back at once instead of waiting out its old session; each replica needs its own. In exactly-once mode the pod's name also makes the transactional id."),
	settings.Info[Config]("FLOW_POD_NAMESPACE", "required in Kubernetes", "its namespace").
		Doc("its namespace (falls back to the service account's)"),
	settings.Info[Config]("FLOW_POD_UID", "required in Kubernetes", "its uid"),
})

// Settings is every variable `millrace sidecar` reads, with its default and meaning, the Kafka
// connection's (kafkaconn.Vars, shared with `millrace replay`) among them: the source of -h.
var Settings = table.Vars()

// withKafkaRows inserts kafkaconn's variables, read by kafkaconn.FromEnv, before the
// FLOW_POD_* rows.
func withKafkaRows(own settings.Table[Config]) settings.Table[Config] {
	var out settings.Table[Config]
	for _, row := range own {
		if row.Name == "FLOW_POD_NAME" {
			for _, v := range kafkaconn.Vars {
				out = append(out, settings.Row[Config]{Var: v})
			}
		}
		out = append(out, row)
	}
	return out
}

// defaultConfig is the Config of a deployment that sets only what is required: every row's
// default. The group (<pipeline>.<streamlet>) and the transactional id are derived from other
// settings (withDefaults).
func defaultConfig() Config {
	c := Config{DiscoveryBackoff: defaultDiscoveryBackoff, FailureBackoff: defaultFailureBackoff}
	table.Defaults(&c)
	return c
}

// defaultInlet is an inlet bound to topic with the default batch limits.
func defaultInlet(port, topic string) Inlet {
	return Inlet{Port: port, Topic: topic, MaxRecords: DefaultBatchMaxRecords, MaxBytes: DefaultBatchMaxBytes}
}

// withDefaults gives the zero fields of a hand-built c the rows' defaults (the readiness file
// and the ports aside: empty writes no file, the process port is required) and the spec's
// backoffs, and derives the group and, in exactly-once mode, the transactional id.
func (c *Config) withDefaults() {
	table.FillZero(c)
	c.DiscoveryBackoff.Initial = cmp.Or(c.DiscoveryBackoff.Initial, defaultDiscoveryBackoff.Initial)
	c.DiscoveryBackoff.Max = cmp.Or(c.DiscoveryBackoff.Max, defaultDiscoveryBackoff.Max)
	c.FailureBackoff.Initial = cmp.Or(c.FailureBackoff.Initial, defaultFailureBackoff.Initial)
	c.FailureBackoff.Max = cmp.Or(c.FailureBackoff.Max, defaultFailureBackoff.Max)
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

// ReadinessFileFromEnv returns the readiness file FLOW_READINESS_FILE names, read through
// getenv, as ConfigFromEnv reads it: for `millrace sidecar ready-check`, which reads nothing
// else.
func ReadinessFileFromEnv(getenv func(string) string) string {
	return settings.NewReader(getenv).String("FLOW_READINESS_FILE", defaultConfig().ReadinessFile)
}
