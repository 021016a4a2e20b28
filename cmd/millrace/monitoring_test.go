package main

// The monitoring manifests against the pod and the code: the metrics ports the pod declares
// are where the sidecar (FLOW_METRICS_ADDR) and the bridge (--metrics) listen, the scrape
// configurations select those ports, and the autoscalers target this Deployment, its consumer
// group and its inlet topic. (That the queries name metrics the code exports is checked
// against running processes by e2e/prometheus_test.go.)

import (
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ankka-flow/millrace/sidecar"
)

const (
	scrapeConfigFile = repoRoot + "/deploy/prometheus/prometheus.yaml"
	podMonitorFile   = repoRoot + "/deploy/prometheus/podmonitor.yaml"
	kedaKafkaFile    = repoRoot + "/deploy/keda/scaledobject-kafka.yaml"
	kedaPromFile     = repoRoot + "/deploy/keda/scaledobject-prometheus.yaml"
	alertsTestFile   = repoRoot + "/deploy/prometheus/alerts_test.yaml"
)

// readYAML reads a manifest into v, fields unknown to v ignored.
func readYAML(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// portNamed returns the container's port called name, or nil.
func portNamed(c *container, name string) *port {
	for i, p := range c.Ports {
		if p.Name == name {
			return &c.Ports[i]
		}
	}
	return nil
}

// checkListen checks that addr (host:port) listens on every interface of the pod, on the port
// the container declares as name.
func checkListen(t *testing.T, c *container, what, addr, name string) {
	t.Helper()
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("container %s: %s = %q is not host:port: %v", c.Name, what, addr, err)
		return
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("container %s: %s = %q listens on %s only; Prometheus and the kubelet reach the pod's IP: write :%s", c.Name, what, addr, host, portStr)
	}
	p := portNamed(c, name)
	if p == nil {
		t.Errorf("container %s declares no port named %s (ports %+v); the scrape configurations find the metrics by that name", c.Name, name, c.Ports)
		return
	}
	if strconv.Itoa(p.ContainerPort) != portStr {
		t.Errorf("container %s: port %s is %d, but %s = %q listens on %s", c.Name, name, p.ContainerPort, what, addr, portStr)
	}
}

func TestMonitoringManifests(t *testing.T) {
	m := readManifests(t, manifestsDir)
	dep := m["Deployment"]
	sc, br := m.containerNamed(t, "sidecar"), m.containerNamed(t, "bridge")
	cfg, err := sidecar.ConfigFromEnv(newRecorder(m.containerEnv(t, sc)).getenv, m.containerFiles(t, sc))
	if err != nil {
		t.Fatalf("sidecar.ConfigFromEnv(the sidecar container) = %v", err)
	}
	a := bridgeAction(t, br, m.containerEnv(t, br))
	const sidecarPort, bridgePort = "sidecar-metrics", "bridge-metrics"

	t.Run("ports", func(t *testing.T) {
		if cfg.MetricsAddr == "" {
			t.Fatal("the sidecar container does not set FLOW_METRICS_ADDR: the sidecar serves no metrics nor health endpoints")
		}
		checkListen(t, sc, "FLOW_METRICS_ADDR", cfg.MetricsAddr, sidecarPort)
		if a.Metrics == "" {
			t.Fatal("the bridge's action line has no --metrics: the bridge serves no metrics")
		}
		checkListen(t, br, "--metrics", a.Metrics, bridgePort)
		lp := sc.LivenessProbe
		if lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/healthz" {
			t.Errorf("container sidecar: liveness probe %+v; want httpGet /healthz on port %s", lp, sidecarPort)
		} else if p := portNamed(sc, sidecarPort); lp.HTTPGet.Port != sidecarPort && (p == nil || lp.HTTPGet.Port != float64(p.ContainerPort)) {
			t.Errorf("container sidecar: the liveness probe asks port %v; want %s, where /healthz is served", lp.HTTPGet.Port, sidecarPort)
		}
	})

	t.Run("scrape configuration", func(t *testing.T) {
		var conf struct {
			ScrapeConfigs []struct {
				RelabelConfigs []struct {
					SourceLabels []string `json:"source_labels"`
					Regex        string   `json:"regex"`
					Action       string   `json:"action"`
					TargetLabel  string   `json:"target_label"`
				} `json:"relabel_configs"`
			} `json:"scrape_configs"`
		}
		readYAML(t, scrapeConfigFile, &conf)
		kept, labels := false, map[string]bool{}
		for _, sc := range conf.ScrapeConfigs {
			for _, r := range sc.RelabelConfigs {
				if r.Action == "keep" && slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_container_port_name"}) {
					re := regexp.MustCompile("^(?:" + r.Regex + ")$")
					kept = re.MatchString(sidecarPort) && re.MatchString(bridgePort)
				}
				labels[r.TargetLabel] = true
			}
		}
		if !kept {
			t.Errorf("%s keeps no target by the port names %s and %s", scrapeConfigFile, sidecarPort, bridgePort)
		}
		for _, l := range []string{"namespace", "pod", "streamlet"} {
			if !labels[l] {
				t.Errorf("%s does not set the label %s, which the alerts and the dashboard group by", scrapeConfigFile, l)
			}
		}

		var pm struct {
			Metadata objectMeta `json:"metadata"`
			Spec     struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				Endpoints []struct {
					Port string `json:"port"`
				} `json:"podMetricsEndpoints"`
			} `json:"spec"`
		}
		readYAML(t, podMonitorFile, &pm)
		var ports []string
		for _, e := range pm.Spec.Endpoints {
			ports = append(ports, e.Port)
		}
		slices.Sort(ports)
		if want := []string{bridgePort, sidecarPort}; !slices.Equal(ports, want) {
			t.Errorf("%s scrapes ports %v; want %v", podMonitorFile, ports, want)
		}
		if pm.Metadata.Namespace != dep.Metadata.Namespace {
			t.Errorf("%s is in namespace %q; the Deployment is in %q", podMonitorFile, pm.Metadata.Namespace, dep.Metadata.Namespace)
		}
		for k, v := range pm.Spec.Selector.MatchLabels {
			if dep.Spec.Template.Metadata.Labels[k] != v {
				t.Errorf("%s selects pods with %s=%s, which the Deployment's pods do not have", podMonitorFile, k, v)
			}
		}
	})

	type scaledObject struct {
		Metadata objectMeta `json:"metadata"`
		Spec     struct {
			ScaleTargetRef struct {
				Name string `json:"name"`
			} `json:"scaleTargetRef"`
			Triggers []struct {
				Type     string            `json:"type"`
				Metadata map[string]string `json:"metadata"`
			} `json:"triggers"`
		} `json:"spec"`
	}
	checkTarget := func(t *testing.T, file string, so *scaledObject, trigger string) map[string]string {
		t.Helper()
		if so.Spec.ScaleTargetRef.Name != dep.Metadata.Name || so.Metadata.Namespace != dep.Metadata.Namespace {
			t.Errorf("%s scales %s/%s; want the Deployment %s/%s", file, so.Metadata.Namespace, so.Spec.ScaleTargetRef.Name, dep.Metadata.Namespace, dep.Metadata.Name)
		}
		if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != trigger {
			t.Fatalf("%s has triggers %+v; want one of type %s", file, so.Spec.Triggers, trigger)
		}
		return so.Spec.Triggers[0].Metadata
	}

	t.Run("kafka autoscaler", func(t *testing.T) {
		var so scaledObject
		readYAML(t, kedaKafkaFile, &so)
		md := checkTarget(t, kedaKafkaFile, &so, "kafka")
		if md["consumerGroup"] != cfg.ConsumerGroup {
			t.Errorf("%s: consumerGroup %q; the sidecar's group is %q", kedaKafkaFile, md["consumerGroup"], cfg.ConsumerGroup)
		}
		if md["bootstrapServers"] != strings.Join(cfg.Brokers, ",") {
			t.Errorf("%s: bootstrapServers %q; the sidecar's FLOW_BROKERS are %q", kedaKafkaFile, md["bootstrapServers"], strings.Join(cfg.Brokers, ","))
		}
		if len(cfg.Inlets) != 1 || md["topic"] != cfg.Inlets[0].Topic {
			t.Errorf("%s: topic %q; the sidecar's inlets are %+v", kedaKafkaFile, md["topic"], cfg.Inlets)
		}
		// A partition with no committed offset is read from its start (the sidecar's reset).
		if md["offsetResetPolicy"] != "earliest" {
			t.Errorf("%s: offsetResetPolicy %q; want earliest, as the sidecar starts an uncommitted partition at its beginning", kedaKafkaFile, md["offsetResetPolicy"])
		}
	})

	t.Run("prometheus autoscaler", func(t *testing.T) {
		var so scaledObject
		readYAML(t, kedaPromFile, &so)
		md := checkTarget(t, kedaPromFile, &so, "prometheus")
		q := md["query"]
		for _, want := range []string{
			`namespace="` + dep.Metadata.Namespace + `"`,
			`streamlet="` + dep.Spec.Template.Metadata.Labels["app.kubernetes.io/name"] + `"`,
			"millrace_sidecar_consumer_lag_records",
			"unless on (namespace, pod, topic, partition)",
			"millrace_sidecar_partition_stalled",
			"unless on (namespace, pod, partition)",
			"millrace_sidecar_state_restoring",
		} {
			if !strings.Contains(q, want) {
				t.Errorf("%s: the query\n%s\nlacks %s", kedaPromFile, q, want)
			}
		}
		// promtool runs the query itself in alerts_test.yaml (scripts/check-deploy): the copy
		// there is this one, so what it shows of stalled and restoring partitions holds here.
		var tests struct {
			Tests []struct {
				PromQL []struct {
					Expr string `json:"expr"`
				} `json:"promql_expr_test"`
			} `json:"tests"`
		}
		readYAML(t, alertsTestFile, &tests)
		found := false
		for _, tc := range tests.Tests {
			for _, e := range tc.PromQL {
				found = found || strings.TrimSpace(e.Expr) == strings.TrimSpace(q)
			}
		}
		if !found {
			t.Errorf("%s has no promql_expr_test of the query of %s (copy it there as it is written):\n%s", alertsTestFile, kedaPromFile, q)
		}
	})
}
