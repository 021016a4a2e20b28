package sidecar_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/sidecar"
)

func validEnv(t *testing.T) env {
	return env{
		"FLOW_BROKERS":    "k1:9092, k2:9092",
		"FLOW_PIPELINE":   "shop",
		"FLOW_STREAMLET":  "upper",
		"FLOW_DESCRIPTOR": writeDescriptor(t, testSpec()),
		"FLOW_INLETS":     "in=orders",
		"FLOW_OUTLETS":    "out=shouts",
		"FLOW_CONFIG":     `{"min-rooms": 3, "suffix": "?"}`,
	}
}

func TestConfigFromEnvDefaults(t *testing.T) {
	cfg, err := sidecar.ConfigFromEnv(validEnv(t).get, nil)
	if err != nil {
		t.Fatalf("ConfigFromEnv(valid) = %v; want nil", err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"brokers", strings.Join(cfg.Brokers, ","), "k1:9092,k2:9092"},
		{"consumer group", cfg.ConsumerGroup, "shop.upper"},
		{"process port", cfg.ProcessPort, 9010},
		{"sidecar port", cfg.SidecarPort, 9011},
		{"inlet", cfg.Inlets[0], sidecar.Inlet{Port: "in", Topic: "orders", MaxRecords: 100, MaxBytes: 1 << 20}},
		{"outlet", cfg.Outlets[0], sidecar.Outlet{Port: "out", Topic: "shouts"}},
		{"max message bytes", cfg.MaxMessageBytes, 4 << 20},
		{"stall warning after", cfg.StallWarningAfter, 5 * time.Minute},
		{"readiness file", cfg.ReadinessFile, sidecar.DefaultReadinessFile},
		{"config min-rooms", cfg.ConfigValues["min-rooms"], "3"},
		{"TLS", cfg.TLS == nil, true},
		{"SASL", cfg.SASL == nil, true},
		{"events outside a cluster", cfg.Events == nil, true},
		{"max batch emit bytes", cfg.MaxBatchEmitBytes, int64(sidecar.DefaultMaxBatchEmitBytes)},
		{"max held emit bytes", cfg.MaxHeldEmitBytes, int64(sidecar.DefaultMaxHeldEmitBytes)},
		{"instance id without a pod", cfg.InstanceID, ""},
		{"session timeout", cfg.SessionTimeout, 45 * time.Second},
		{"commit interval", cfg.CommitInterval, 100 * time.Millisecond},
		{"delivery", cfg.Delivery, sidecar.AtLeastOnce},
		{"transactional id (at least once: none)", cfg.TransactionalID, ""},
		{"produce compression", cfg.Compression, sidecar.CompressionNone},
	} {
		if c.got != c.want {
			t.Errorf("ConfigFromEnv(valid) %s = %v; want %v", c.name, c.got, c.want)
		}
	}
}

func TestConfigFromEnvSettings(t *testing.T) {
	e := validEnv(t)
	e["FLOW_INLET_IN_BATCH_MAX_RECORDS"] = "500"
	e["FLOW_INLET_IN_BATCH_MAX_BYTES"] = "2Mi"
	e["FLOW_MAX_MESSAGE_BYTES"] = "8Mi"
	e["FLOW_CONSUMER_GROUP"] = "g"
	e["FLOW_KAFKA_SASL_MECHANISM"] = "scram-sha-512"
	e["FLOW_KAFKA_SASL_USERNAME"] = "u"
	e["FLOW_KAFKA_SASL_PASSWORD"] = "p"
	e["FLOW_KAFKA_TLS"] = "true"
	e["FLOW_MAX_BATCH_EMIT_BYTES"] = "100Mi"
	e["FLOW_MAX_HELD_EMIT_BYTES"] = "1Gi"
	e["FLOW_POD_NAME"] = "upper-7d9f-x2"
	e["FLOW_SESSION_TIMEOUT"] = "2m"
	e["FLOW_COMMIT_INTERVAL"] = "250ms"
	e["FLOW_LEAVE_GROUP_ON_SHUTDOWN"] = "false"
	e["FLOW_PRODUCE_COMPRESSION"] = " ZSTD "
	cfg, err := sidecar.ConfigFromEnv(e.get, nil)
	if err != nil {
		t.Fatalf("ConfigFromEnv() = %v; want nil", err)
	}
	if cfg.MaxBatchEmitBytes != 100<<20 || cfg.MaxHeldEmitBytes != 1<<30 || cfg.InstanceID != "upper-7d9f-x2" || cfg.SessionTimeout != 2*time.Minute || !cfg.KeepMembershipOnShutdown {
		t.Errorf("ConfigFromEnv() budgets %d/%d, instance %q, session %v; want 100Mi/1Gi, upper-7d9f-x2, 2m", cfg.MaxBatchEmitBytes, cfg.MaxHeldEmitBytes, cfg.InstanceID, cfg.SessionTimeout)
	}
	if cfg.CommitInterval != 250*time.Millisecond {
		t.Errorf("ConfigFromEnv() commit interval %v; want 250ms", cfg.CommitInterval)
	}
	e["FLOW_COMMIT_INTERVAL"] = "0"
	if every, err := sidecar.ConfigFromEnv(e.get, nil); err != nil {
		t.Errorf("ConfigFromEnv(FLOW_COMMIT_INTERVAL=0) = %v; want nil", err)
	} else if every.CommitInterval != sidecar.CommitEveryRound {
		t.Errorf("ConfigFromEnv(FLOW_COMMIT_INTERVAL=0) commit interval %v; want CommitEveryRound", every.CommitInterval)
	}
	if cfg.Inlets[0].MaxRecords != 500 || cfg.Inlets[0].MaxBytes != 2<<20 || cfg.MaxMessageBytes != 8<<20 || cfg.ConsumerGroup != "g" {
		t.Errorf("ConfigFromEnv() = %+v; want the values set", cfg)
	}
	if cfg.Compression != sidecar.CompressionZstd {
		t.Errorf("ConfigFromEnv() compression = %q; want zstd", cfg.Compression)
	}
	if cfg.SASL == nil || cfg.SASL.Name() != "SCRAM-SHA-512" {
		t.Errorf("SASL = %v; want SCRAM-SHA-512", cfg.SASL)
	}
	if cfg.TLS == nil {
		t.Errorf("TLS = nil; want a TLS config")
	}
}

func TestConfigFromEnvProblems(t *testing.T) {
	missingFile := filepath.Join(t.TempDir(), "nope.json")
	garbage := filepath.Join(t.TempDir(), "garbage.json")
	if err := os.WriteFile(garbage, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  map[string]string
		want []string
	}{
		{name: "nothing set", set: map[string]string{"FLOW_BROKERS": "", "FLOW_PIPELINE": "", "FLOW_STREAMLET": "", "FLOW_DESCRIPTOR": "", "FLOW_INLETS": "", "FLOW_OUTLETS": "", "FLOW_CONFIG": ""},
			want: []string{"FLOW_BROKERS is missing", "FLOW_PIPELINE is missing", "FLOW_STREAMLET is missing", "FLOW_DESCRIPTOR is missing"}},
		{name: "brokers", set: map[string]string{"FLOW_BROKERS": "k1:9092,k2,:9092,k3:x"}, want: []string{`"k2" is not host:port`, `":9092" is not host:port`, `"k3:x" is not host:port`}},
		{name: "descriptor unreadable", set: map[string]string{"FLOW_DESCRIPTOR": missingFile}, want: []string{"FLOW_DESCRIPTOR=" + missingFile + " cannot be read"}},
		{name: "descriptor garbage", set: map[string]string{"FLOW_DESCRIPTOR": garbage}, want: []string{"is not a valid descriptor"}},
		{name: "bindings", set: map[string]string{"FLOW_INLETS": "other=x,junk", "FLOW_OUTLETS": "out=a,out=b"},
			want: []string{`"junk" is not port=topic`, `does not bind declared port "in"`, `binds "other", which the descriptor does not declare`, `binds port "out" twice`}},
		{name: "numbers", set: map[string]string{"FLOW_PROCESS_PORT": "abc", "FLOW_SIDECAR_PORT": "70000", "FLOW_STALL_WARNING_AFTER": "-1s", "FLOW_SHUTDOWN_TIMEOUT": "soon",
			"FLOW_MAX_MESSAGE_BYTES": "lots", "FLOW_INLET_IN_BATCH_MAX_RECORDS": "0", "FLOW_INLET_IN_BATCH_MAX_BYTES": "1Qi",
			"FLOW_MAX_BATCH_EMIT_BYTES": "12", "FLOW_MAX_HELD_EMIT_BYTES": "much", "FLOW_SESSION_TIMEOUT": "0s", "FLOW_LEAVE_GROUP_ON_SHUTDOWN": "maybe", "FLOW_COMMIT_INTERVAL": "-1s"},
			want: []string{"FLOW_PROCESS_PORT=abc", "FLOW_SIDECAR_PORT=70000", "FLOW_STALL_WARNING_AFTER=-1s", "FLOW_SHUTDOWN_TIMEOUT=soon", "FLOW_MAX_MESSAGE_BYTES=lots", "FLOW_INLET_IN_BATCH_MAX_RECORDS=0", "FLOW_INLET_IN_BATCH_MAX_BYTES=1Qi",
				"FLOW_MAX_BATCH_EMIT_BYTES=12 is not a size of at least 1Ki", "FLOW_MAX_HELD_EMIT_BYTES=much", "FLOW_SESSION_TIMEOUT=0s", "FLOW_LEAVE_GROUP_ON_SHUTDOWN=maybe",
				"FLOW_COMMIT_INTERVAL=-1s is not a duration of 0 or more"}},
		{name: "batch over the message limit", set: map[string]string{"FLOW_MAX_MESSAGE_BYTES": "1Mi"}, want: []string{"FLOW_INLET_IN_BATCH_MAX_BYTES=1048576 does not leave a batch under the message limit"}},
		{name: "config", set: map[string]string{"FLOW_CONFIG": `{"suffix": 1, "typo": "x"}`}, want: []string{"config.min-rooms", "config.typo"}},
		{name: "config not json", set: map[string]string{"FLOW_CONFIG": `min-rooms=2`}, want: []string{"FLOW_CONFIG is not a JSON object"}},
		{name: "security", set: map[string]string{"FLOW_KAFKA_TLS": "maybe", "FLOW_KAFKA_SASL_MECHANISM": "GSSAPI", "FLOW_KAFKA_SASL_USERNAME": "u"},
			want: []string{"FLOW_KAFKA_TLS=maybe", "FLOW_KAFKA_SASL_MECHANISM=GSSAPI is not PLAIN", "needs FLOW_KAFKA_SASL_USERNAME and FLOW_KAFKA_SASL_PASSWORD"}},
		{name: "TLS files", set: map[string]string{"FLOW_KAFKA_TLS": "true", "FLOW_KAFKA_TLS_CA_FILE": missingFile, "FLOW_KAFKA_TLS_CERT_FILE": garbage},
			want: []string{"FLOW_KAFKA_TLS_CA_FILE=" + missingFile + " cannot be read", "go together"}},
		{name: "delivery", set: map[string]string{"FLOW_DELIVERY": "exactly-twice"}, want: []string{"FLOW_DELIVERY=exactly-twice is not a delivery: write at-least-once (the default) or exactly-once"}},
		{name: "compression", set: map[string]string{"FLOW_PRODUCE_COMPRESSION": "brotli"}, want: []string{"FLOW_PRODUCE_COMPRESSION=brotli is not a compression codec: write none (the default), gzip, snappy, lz4 or zstd"}},
		{name: "in Kubernetes without the pod", set: map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, want: []string{"FLOW_POD_NAME", "FLOW_POD_UID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := validEnv(t)
			for k, v := range tc.set {
				e[k] = v
			}
			_, err := sidecar.ConfigFromEnv(e.get, nil)
			var ce *sidecar.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, sidecar.ErrConfig) {
				t.Fatalf("ConfigFromEnv() = %v; want a *ConfigError matching ErrConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ConfigFromEnv() =\n%v\nwant a problem naming %q", err, w)
				}
			}
			if len(ce.Problems) < len(tc.want) && tc.name != "in Kubernetes without the pod" {
				t.Errorf("problems = %d; want at least %d, all at once", len(ce.Problems), len(tc.want))
			}
		})
	}
}

// TestConfigDelivery: FLOW_DELIVERY=exactly-once takes a transactional id stable per pod,
// FLOW_POD_NAME where set, else the host and the process port.
func TestConfigDelivery(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct {
		name string
		set  map[string]string
		want string
	}{
		{name: "pod", set: map[string]string{"FLOW_POD_NAME": "score-7f9c-x2"}, want: "shop.upper.score-7f9c-x2"},
		{name: "pod and group", set: map[string]string{"FLOW_POD_NAME": "score-0", "FLOW_CONSUMER_GROUP": "g"}, want: "g.score-0"},
		{name: "no pod", set: map[string]string{"FLOW_PROCESS_PORT": "9100"}, want: "shop.upper." + host + ":9100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := validEnv(t)
			e["FLOW_DELIVERY"] = "exactly-once"
			for k, v := range tc.set {
				e[k] = v
			}
			cfg, err := sidecar.ConfigFromEnv(e.get, nil)
			if err != nil {
				t.Fatalf("ConfigFromEnv() = %v; want nil", err)
			}
			if cfg.Delivery != sidecar.ExactlyOnce || cfg.TransactionalID != tc.want {
				t.Errorf("ConfigFromEnv() delivery, transactional id = %s, %q; want %s, %q", cfg.Delivery, cfg.TransactionalID, sidecar.ExactlyOnce, tc.want)
			}
		})
	}
	cfg, err := sidecar.ConfigFromEnv(validEnv(t).get, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Delivery = "once-ish"
	if _, err := sidecar.New(cfg, nil); !errors.Is(err, sidecar.ErrConfig) || !strings.Contains(err.Error(), "once-ish") {
		t.Errorf("New(Delivery once-ish) = %v; want ErrConfig naming it", err)
	}
}
