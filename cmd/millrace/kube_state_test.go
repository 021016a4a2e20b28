package main

// The stateful variant of the Kubernetes example (deploy/kubernetes/listing-count/) and the
// example's topics (deploy/kubernetes/topics.yaml): the line's --state and the sidecar's
// variables agree, each changelog is declared compacted with its inlet's partitions, the state
// directory is a size-limited emptyDir, the descriptor is the line's.

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/protocol"
	"github.com/ankka-flow/millrace/sidecar"
)

const (
	stateManifestsDir = manifestsDir + "/listing-count"
	topicsFile        = manifestsDir + "/topics.yaml"
	countExample      = repoRoot + "/deploy/examples/python-count/Dockerfile"
	kafkaTopicKind    = "KafkaTopic"
	stateVarPrefix    = "FLOW_INLET_"
	stateVarSuffix    = "_STATE_TOPIC"
)

// kafkaTopic is a Strimzi KafkaTopic, decoded strictly.
type kafkaTopic struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		TopicName  string         `json:"topicName,omitempty"`
		Partitions int            `json:"partitions"`
		Replicas   int            `json:"replicas"`
		Config     map[string]any `json:"config,omitempty"`
	} `json:"spec"`
}

// name is the Kafka topic's name: spec.topicName, else the resource's name (Strimzi's rule).
func (k *kafkaTopic) name() string {
	if k.Spec.TopicName != "" {
		return k.Spec.TopicName
	}
	return k.Metadata.Name
}

// kindOf returns a YAML document's kind, "" when it has none.
func kindOf(doc string) string {
	var o struct {
		Kind string `json:"kind"`
	}
	_ = yaml.Unmarshal([]byte(doc), &o) // a document that does not parse fails its strict decode after
	return o.Kind
}

// readTopics returns the KafkaTopics of topics.yaml by topic name.
func readTopics(t *testing.T) map[string]*kafkaTopic {
	t.Helper()
	data, err := os.ReadFile(topicsFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*kafkaTopic{}
	for i, doc := range docSep.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		k := &kafkaTopic{}
		if err := yaml.UnmarshalStrict([]byte(doc), k); err != nil {
			t.Fatalf("%s document %d: %v", topicsFile, i+1, err)
		}
		if k.Kind != kafkaTopicKind || k.APIVersion != "kafka.strimzi.io/v1beta2" {
			t.Errorf("%s document %d is %s %s; want only kafka.strimzi.io/v1beta2 KafkaTopics", topicsFile, i+1, k.APIVersion, k.Kind)
		}
		if k.Metadata.Labels["strimzi.io/cluster"] == "" {
			t.Errorf("%s: KafkaTopic %s has no strimzi.io/cluster label: the Topic Operator ignores it", topicsFile, k.Metadata.Name)
		}
		if k.Spec.Partitions < 1 || k.Spec.Replicas < 1 {
			t.Errorf("%s: KafkaTopic %s has %d partitions and %d replicas; want at least 1 of each", topicsFile, k.Metadata.Name, k.Spec.Partitions, k.Spec.Replicas)
		}
		if _, dup := out[k.name()]; dup {
			t.Errorf("%s declares topic %s twice", topicsFile, k.name())
		}
		out[k.name()] = k
	}
	return out
}

// portTopics parses FLOW_INLETS or FLOW_OUTLETS: port=topic, separated by commas.
func portTopics(t *testing.T, name, v string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		port, topic, ok := strings.Cut(pair, "=")
		if !ok {
			t.Fatalf("%s=%s: %q is not port=topic", name, v, pair)
		}
		out[port] = topic
	}
	return out
}

// TestKubernetesTopics checks that topics.yaml declares every topic the example's pods bind.
func TestKubernetesTopics(t *testing.T) {
	topics := readTopics(t)
	for _, dir := range []string{manifestsDir, stateManifestsDir} {
		m := parseManifests(t, dir)
		env := m.containerEnv(t, m.containerNamed(t, "sidecar"))
		for _, v := range []string{"FLOW_INLETS", "FLOW_OUTLETS"} {
			for port, topic := range portTopics(t, v, env[v]) {
				if topics[topic] == nil {
					t.Errorf("%s: %s binds %s to topic %s, which %s does not declare", dir, v, port, topic, topicsFile)
				} else if c := topics[topic].Spec.Config["cleanup.policy"]; c != nil && c != "delete" {
					t.Errorf("%s: topic %s (%s) has cleanup.policy %v; an inlet or outlet keeps Kafka's default, delete", topicsFile, topic, v, c)
				}
			}
		}
	}
}

// TestKubernetesStateExample checks the stateful variant against the code and topics.yaml.
func TestKubernetesStateExample(t *testing.T) {
	m := parseManifests(t, stateManifestsDir)
	topics := readTopics(t)
	sc, br := m.containerNamed(t, "sidecar"), m.containerNamed(t, "bridge")
	scEnv, brEnv := m.containerEnv(t, sc), m.containerEnv(t, br)
	a := bridgeAction(t, br, brEnv)
	if len(a.State) == 0 {
		t.Fatalf("the bridge's line %s has no --state: the stateful example keeps no state", a.Line())
	}

	t.Run("line and variables", func(t *testing.T) {
		inlets := portTopics(t, "FLOW_INLETS", scEnv["FLOW_INLETS"])
		stateful := map[string]bool{}
		for _, s := range a.State {
			stateful[s.Port] = true
			v := protocol.StateTopicVar(s.Port)
			changelog := scEnv[v]
			if changelog == "" {
				t.Errorf("the line keeps state for inlet %s (--state %s) but the sidecar container does not set %s: the sidecar would keep none", s.Port, s.Port, v)
				continue
			}
			inlet := topics[inlets[s.Port]]
			switch k := topics[changelog]; {
			case k == nil:
				t.Errorf("%s=%s: %s does not declare that topic", v, changelog, topicsFile)
			case k.Spec.Config["cleanup.policy"] != "compact":
				t.Errorf("%s=%s: cleanup.policy is %v in %s; want compact, exactly", v, changelog, k.Spec.Config["cleanup.policy"], topicsFile)
			case inlet == nil:
				t.Errorf("inlet %s's topic %q is not in %s, so the changelog's partitions cannot be checked", s.Port, inlets[s.Port], topicsFile)
			case k.Spec.Partitions != inlet.Spec.Partitions:
				t.Errorf("%s=%s has %d partitions in %s; its inlet topic %s has %d: want as many", v, changelog, k.Spec.Partitions, topicsFile, inlet.name(), inlet.Spec.Partitions)
			}
			group := scEnv["FLOW_PIPELINE"] + "." + scEnv["FLOW_STREAMLET"]
			if g := scEnv["FLOW_CONSUMER_GROUP"]; g != "" {
				group = g
			}
			if want := group + "." + s.Port + ".state"; changelog != want {
				t.Errorf("%s=%s; want the name millrace describe suggests, %s", v, changelog, want)
			}
		}
		for name := range scEnv {
			if port, ok := strings.CutSuffix(strings.TrimPrefix(name, stateVarPrefix), stateVarSuffix); ok && strings.HasPrefix(name, stateVarPrefix) {
				found := false
				for p := range stateful {
					found = found || protocol.StateTopicVar(p) == name
				}
				if !found {
					t.Errorf("the sidecar container sets %s but the line has no --state for that inlet (%s): the sidecar would refuse the process", name, strings.ToLower(port))
				}
			}
		}
		if scEnv["FLOW_SIDECAR_PORT"] == "" || scEnv["FLOW_SIDECAR_PORT"] != brEnv["FLOW_SIDECAR_PORT"] {
			t.Errorf("FLOW_SIDECAR_PORT is %q in the sidecar and %q in the bridge; set the same in both, where the State service is served and dialled", scEnv["FLOW_SIDECAR_PORT"], brEnv["FLOW_SIDECAR_PORT"])
		}
	})

	// As `millrace sidecar` and `millrace bridge` read the containers' variables.
	t.Run("settings", func(t *testing.T) {
		rec := newRecorder(scEnv)
		cfg, err := sidecar.ConfigFromEnv(rec.getenv, m.containerFiles(t, sc))
		if err != nil {
			t.Fatalf("sidecar.ConfigFromEnv(the sidecar container's environment and files) = %v; want no problem", err)
		}
		if unread := rec.unread(sc); len(unread) > 0 {
			t.Errorf("the sidecar container sets %s, which the sidecar never reads", strings.Join(unread, ", "))
		}
		got := map[string]string{}
		for _, in := range cfg.Inlets {
			if in.StateTopic != "" {
				got[in.Port] = in.StateTopic
			}
		}
		want := map[string]string{}
		for _, st := range a.State {
			want[st.Port] = scEnv[protocol.StateTopicVar(st.Port)]
		}
		if !maps.Equal(got, want) {
			t.Errorf("the sidecar keeps state for %v; want the line's --state inlets with their variables, %v", got, want)
		}
		if cfg.StateDir != scEnv["FLOW_STATE_DIR"] {
			t.Errorf("the sidecar's StateDir = %q; want FLOW_STATE_DIR's %q", cfg.StateDir, scEnv["FLOW_STATE_DIR"])
		}
		brRec := newRecorder(brEnv)
		bcfg, err := bridge.ConfigFromEnv(brRec.getenv)
		if err != nil {
			t.Fatalf("container bridge: %v", err)
		}
		_, _ = actionconf.FromEnv(brRec.getenv) // only the names it reads matter here
		if unread := brRec.unread(br); len(unread) > 0 {
			t.Errorf("the bridge container sets %s, which the bridge never reads", strings.Join(unread, ", "))
		}
		if bcfg.SidecarPort != cfg.SidecarPort || bcfg.Port != cfg.ProcessPort {
			t.Errorf("the bridge dials the State service on %d and listens on %d; the sidecar serves it on %d and dials %d", bcfg.SidecarPort, bcfg.Port, cfg.SidecarPort, cfg.ProcessPort)
		}
	})

	t.Run("state directory", func(t *testing.T) {
		dir := scEnv["FLOW_STATE_DIR"]
		if dir == "" {
			t.Fatal("the sidecar container does not set FLOW_STATE_DIR: its store would be in /tmp of a read-only root")
		}
		vm, v := m.mountFor(sc, dir)
		switch {
		case vm == nil || v == nil || v.EmptyDir == nil:
			t.Errorf("FLOW_STATE_DIR=%s is not in an emptyDir mounted in the sidecar container", dir)
		case v.EmptyDir.SizeLimit == "":
			t.Errorf("the state volume %s has no sizeLimit: the store could fill the node's disk", v.Name)
		case v.EmptyDir.Medium == "Memory":
			t.Errorf("the state volume %s is in memory: the store's files would count against the container's memory limit", v.Name)
		case vm.ReadOnly:
			t.Errorf("the state volume %s is mounted read-only", v.Name)
		}
	})

	t.Run("descriptor", func(t *testing.T) {
		imageVersion := millraceImageTag(t)
		if strings.TrimSpace(a.Spec(imageVersion).ProtocolVersion) != protocol.Version {
			t.Errorf("a stateful line's descriptor says protocol %s; want %s", a.Spec(imageVersion).ProtocolVersion, protocol.Version)
		}
		descriptor, err := protocol.MarshalDescriptor(a.Spec(imageVersion))
		if err != nil {
			t.Fatal(err)
		}
		defer func(v string) { version = v }(version)
		version = imageVersion
		// describe prints the descriptor on stdout and, given the group, the changelog topics
		// and variables this pod sets on stderr.
		var stdout, stderr bytes.Buffer
		group := scEnv["FLOW_PIPELINE"] + "." + scEnv["FLOW_STREAMLET"]
		if code := dispatch(context.Background(), &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}, []string{"describe", "--group", group, actionconf.Join(br.Args[1:])}); code != 0 || stdout.String() != string(descriptor)+"\n" {
			t.Errorf("millrace describe LINE = exit %d %q %q; want exit 0 and the descriptor:\n%s", code, stdout.String(), stderr.String(), descriptor)
		}
		for _, s := range a.State {
			v := protocol.StateTopicVar(s.Port)
			if want := v + "=" + scEnv[v]; !strings.Contains(stderr.String(), want) {
				t.Errorf("millrace describe --group %s LINE says\n%s\nwhich lacks %s, as the sidecar container sets it", group, stderr.String(), want)
			}
		}
		cm := m["ConfigMap"]
		if cm == nil {
			t.Fatalf("%s holds no ConfigMap for the descriptor", stateManifestsDir)
		}
		if *updateDeploy {
			file := filepath.Join(stateManifestsDir, cm.file)
			if err := os.WriteFile(file, descriptorConfigMap(cm, imageVersion, "for the count example of the Python SDK (sdk/python/examples/count.py)", "TestKubernetesStateExample", descriptor), 0o644); err != nil {
				t.Fatal(err)
			}
			cm = parseManifests(t, stateManifestsDir)["ConfigMap"]
		}
		if got := cm.Data[descriptorKey]; strings.TrimSuffix(got, "\n") != string(descriptor) {
			t.Errorf("ConfigMap %s %s =\n%s\nwant what the code makes of the bridge's action line (rewrite it: go test ./cmd/millrace -run TestKubernetesStateExample -update-deploy):\n%s", cm.Metadata.Name, descriptorKey, got, descriptor)
		}
		if vm, v := m.mountFor(sc, path.Dir(scEnv["FLOW_DESCRIPTOR"])); vm == nil || v == nil || v.ConfigMap == nil || v.ConfigMap.Name != cm.Metadata.Name {
			t.Errorf("FLOW_DESCRIPTOR=%s is not in the mount of ConfigMap %s", scEnv["FLOW_DESCRIPTOR"], cm.Metadata.Name)
		}
	})

	t.Run("image", func(t *testing.T) {
		ex := readDockerfile(t, countExample)
		if wd, ok := lastOf(ex, "WORKDIR"); !ok || wd.args != br.WorkingDir {
			t.Errorf("the bridge container's workingDir %q is not %s's WORKDIR %q", br.WorkingDir, countExample, wd.args)
		}
		program := a.Command[len(a.Command)-1]
		var copied []string
		for _, in := range ex {
			if flags, rest := withoutFlags(in.args); in.cmd == "COPY" && len(flags) == 0 {
				f := strings.Fields(rest)
				srcs, dst := f[:len(f)-1], f[len(f)-1]
				for _, src := range srcs {
					if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
						t.Errorf("%s line %d copies %s: %v", countExample, in.line, src, err)
					}
					// The name the file has in the image: one source copied to a file
					// name takes that name; otherwise it keeps its own.
					name := path.Base(src)
					if len(srcs) == 1 && !strings.HasSuffix(dst, "/") && dst != "." {
						name = path.Base(dst)
					}
					copied = append(copied, name)
				}
			}
		}
		if !slices.Contains(copied, program) || !slices.Contains(copied, "millrace.py") {
			t.Errorf("%s copies %v; want the program %s and the SDK it imports, millrace.py", countExample, copied, program)
		}
		if sc.Image == "" || sc.Image != br.Image {
			t.Errorf("the sidecar runs image %q and the bridge %q; want one image", sc.Image, br.Image)
		}
	})
}
