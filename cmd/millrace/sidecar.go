package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/ankka-flow/millrace/sidecar"
	"github.com/ankka-flow/millrace/sidecar/kafkaconn"
)

// runSidecar runs the standard Ankka Flow sidecar, configured by FLOW_* environment variables
// (README, "The sidecar"). `millrace sidecar ready-check` exits 0 iff the readiness file
// exists, for a container probe without a shell.
func runSidecar(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "sidecar", "[ready-check] [-log-level LEVEL]\n\n"+
		"Runs the standard Ankka Flow sidecar: Kafka to the streamlet process on\n"+
		"127.0.0.1:$FLOW_PROCESS_PORT and back. `ready-check` exits 0 once $FLOW_READINESS_FILE exists.\n"+
		"The environment it reads (README, \"The sidecar\"):\n"+sidecarEnvHelp())
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := fs.parse(args); err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fs.usageErr(fmt.Sprintf("-log-level %q is not debug, info, warn or error", *level))
	}
	switch {
	case fs.NArg() == 1 && fs.Arg(0) == "ready-check":
		path := e.getenv("FLOW_READINESS_FILE")
		if path == "" {
			path = sidecar.DefaultReadinessFile
		}
		if !sidecar.Ready(path) {
			return &exitError{code: 1, msg: "not ready: " + path + " does not exist"}
		}
		return nil
	case fs.NArg() > 0:
		return fs.usageErr(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}

	logger := slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: lv})).With("pipeline", e.getenv("FLOW_PIPELINE"), "streamlet", e.getenv("FLOW_STREAMLET"))
	cfg, err := sidecar.ConfigFromEnv(e.getenv, nil)
	if err != nil {
		return err
	}
	cfg.SidecarVersion = Version()
	sc, err := sidecar.New(cfg, logger)
	if err != nil {
		return err
	}
	if err := sc.Run(ctx); err != nil {
		if errors.Is(err, sidecar.ErrRefused) || errors.Is(err, kafkaconn.ErrRefused) {
			return &exitError{code: 1, msg: err.Error()}
		}
		return err
	}
	return nil
}

// sidecarEnv is every variable `millrace sidecar` reads, with its default and meaning: the
// source of `sidecar -h` (TestSidecarEnvTable compares it with what ConfigFromEnv reads). The
// Kafka connection's variables are kafkaconn's, shared with `millrace replay`.
var sidecarEnv = withKafkaEnv(sidecarOwnEnv)

// withKafkaEnv inserts kafkaconn's variables before the FLOW_POD_* ones.
func withKafkaEnv(own []sidecarVar) []sidecarVar {
	var out []sidecarVar
	for _, v := range own {
		if v.name == "FLOW_POD_NAME" {
			out = append(out, kafkaEnv()...)
		}
		out = append(out, v)
	}
	return out
}

// kafkaEnv are the Kafka connection's variables (kafkaconn.Vars).
func kafkaEnv() []sidecarVar {
	var out []sidecarVar
	for _, v := range kafkaconn.Vars {
		out = append(out, sidecarVar{v.Name, v.Default, v.Help})
	}
	return out
}

type sidecarVar struct{ name, def, help string }

var sidecarOwnEnv = []sidecarVar{
	{"FLOW_BROKERS", "required", "Kafka bootstrap brokers, host:port separated by commas"},
	{"FLOW_PIPELINE", "required", "the pipeline's name, sent in Start"},
	{"FLOW_STREAMLET", "required", "the streamlet's name in the pipeline, sent in Start"},
	{"FLOW_DESCRIPTOR", "required", "path of the deployed descriptor.json; discovery must match it"},
	{"FLOW_INLETS", "required for declared inlets", "bindings port=topic,port=topic"},
	{"FLOW_OUTLETS", "required for declared outlets", "bindings port=topic,port=topic"},
	{"FLOW_INLET_<PORT>_BATCH_MAX_RECORDS", "100", "records per batch of one inlet (<PORT> upper case, - as _)"},
	{"FLOW_INLET_<PORT>_BATCH_MAX_BYTES", "1Mi", "bytes per batch of one inlet"},
	{"FLOW_CONFIG", "{}", "deploy-time config values, a JSON object"},
	{"FLOW_CONSUMER_GROUP", "<pipeline>.<streamlet>", "the consumer group"},
	{"FLOW_PROCESS_PORT", "9010", "the streamlet process's port on 127.0.0.1"},
	{"FLOW_SIDECAR_PORT", "9011", "reserved; checked, never bound"},
	{"FLOW_READINESS_FILE", sidecar.DefaultReadinessFile, "written once a conversation is open"},
	{"FLOW_STALL_WARNING_AFTER", "5m", "a partition failing this long gets a PartitionStalled Event"},
	{"FLOW_MAX_MESSAGE_BYTES", "4Mi", "the gRPC message limit both ways, and the producer's batch cap"},
	{"FLOW_SHUTDOWN_TIMEOUT", "20s", "on SIGTERM, how long the process may finish its batches"},
	{"FLOW_METRICS_ADDR", "off", "host:port or :port serving /metrics, /healthz and /readyz"},
	{"FLOW_MAX_BATCH_EMIT_BYTES", "32Mi", "emits one batch may hold until its Ack; over it the partition is redelivered in halves"},
	{"FLOW_MAX_HELD_EMIT_BYTES", "64Mi", "emits held in all until written; past it no new batch is sent"},
	{"FLOW_DELIVERY", "at-least-once", "exactly-once: each commit interval is one Kafka transaction (emits and offsets)"},
	{"FLOW_COMMIT_INTERVAL", "100ms", "how often confirmed offsets are committed; 0 after every round"},
	{"FLOW_PRODUCE_COMPRESSION", "none", "the emits' record batch compression: none, gzip, snappy, lz4 or zstd"},
	{"FLOW_SESSION_TIMEOUT", "45s", "the consumer group session timeout"},
	{"FLOW_LEAVE_GROUP_ON_SHUTDOWN", "true", "with FLOW_POD_NAME (static membership): leave the group on SIGTERM"},
	{"FLOW_POD_NAME", "required in Kubernetes", "the pod stall Events are about (downward API); the static group member id"},
	{"FLOW_POD_NAMESPACE", "required in Kubernetes", "its namespace"},
	{"FLOW_POD_UID", "required in Kubernetes", "its uid"},
}

func sidecarEnvHelp() string {
	var b strings.Builder
	for _, v := range sidecarEnv {
		fmt.Fprintf(&b, "  %s (%s)\n    \t%s\n", v.name, v.def, v.help)
	}
	b.WriteString("Flags:")
	return b.String()
}
