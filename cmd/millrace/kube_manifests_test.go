package main

// The Kubernetes example's manifests as the tests read them: the parts of the objects it uses,
// decoded strictly, and the helpers that feed them to the functions the binary calls.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ankka-flow/millrace/bridge/actionconf"
)

// The parts of the Kubernetes objects the example uses. They are decoded strictly: a field the
// example uses that is not here (a typo, or a new field) fails the test, so add it here with its
// check.
type (
	object struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   objectMeta        `json:"metadata"`
		Spec       *deploymentSpec   `json:"spec,omitempty"`                         // Deployment
		Data       map[string]string `json:"data,omitempty"`                         // ConfigMap
		Type       string            `json:"type,omitempty"`                         // Secret
		StringData map[string]string `json:"stringData,omitempty"`                   // Secret
		Rules      []policyRule      `json:"rules,omitempty"`                        // Role
		RoleRef    *roleRef          `json:"roleRef,omitempty"`                      // RoleBinding
		Subjects   []subject         `json:"subjects,omitempty"`                     // RoleBinding
		Automount  *bool             `json:"automountServiceAccountToken,omitempty"` // ServiceAccount
		file       string
	}
	objectMeta struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels,omitempty"`
		// kubectl create … --dry-run=client -o yaml writes creationTimestamp: null.
		CreationTimestamp any `json:"creationTimestamp,omitempty"`
	}
	deploymentSpec struct {
		Replicas int `json:"replicas"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Template struct {
			Metadata objectMeta `json:"metadata"`
			Spec     podSpec    `json:"spec"`
		} `json:"template"`
	}
	podSpec struct {
		ServiceAccountName            string      `json:"serviceAccountName"`
		Automount                     *bool       `json:"automountServiceAccountToken,omitempty"`
		TerminationGracePeriodSeconds *int64      `json:"terminationGracePeriodSeconds,omitempty"`
		SecurityContext               *secContext `json:"securityContext,omitempty"`
		Containers                    []container `json:"containers"`
		Volumes                       []volume    `json:"volumes"`
	}
	secContext struct {
		RunAsNonRoot             *bool  `json:"runAsNonRoot,omitempty"`
		RunAsUser                *int64 `json:"runAsUser,omitempty"`
		RunAsGroup               *int64 `json:"runAsGroup,omitempty"`
		FSGroup                  *int64 `json:"fsGroup,omitempty"`
		AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation,omitempty"`
		ReadOnlyRootFilesystem   *bool  `json:"readOnlyRootFilesystem,omitempty"`
		Capabilities             *struct {
			Drop []string `json:"drop"`
		} `json:"capabilities,omitempty"`
		SeccompProfile *struct {
			Type string `json:"type"`
		} `json:"seccompProfile,omitempty"`
	}
	container struct {
		Name            string        `json:"name"`
		Image           string        `json:"image"`
		Command         []string      `json:"command,omitempty"`
		Args            []string      `json:"args,omitempty"`
		WorkingDir      string        `json:"workingDir,omitempty"`
		Env             []envVar      `json:"env,omitempty"`
		Ports           []port        `json:"ports,omitempty"` // checked in monitoring_test.go
		ReadinessProbe  *probe        `json:"readinessProbe,omitempty"`
		LivenessProbe   *probe        `json:"livenessProbe,omitempty"`
		VolumeMounts    []volumeMount `json:"volumeMounts,omitempty"`
		SecurityContext *secContext   `json:"securityContext,omitempty"`
		Resources       struct {
			Requests map[string]string `json:"requests,omitempty"`
			Limits   map[string]string `json:"limits,omitempty"`
		} `json:"resources"`
	}
	envVar struct {
		Name      string `json:"name"`
		Value     string `json:"value,omitempty"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `json:"fieldPath"`
			} `json:"fieldRef,omitempty"`
		} `json:"valueFrom,omitempty"`
	}
	probe struct {
		Exec *struct {
			Command []string `json:"command"`
		} `json:"exec,omitempty"`
		HTTPGet *struct {
			Path string `json:"path"`
			Port any    `json:"port"` // a number or a port's name
		} `json:"httpGet,omitempty"`
		PeriodSeconds int `json:"periodSeconds,omitempty"`
	}
	port struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
		Protocol      string `json:"protocol,omitempty"`
	}
	volumeMount struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly,omitempty"`
	}
	volume struct {
		Name      string `json:"name"`
		ConfigMap *struct {
			Name string `json:"name"`
		} `json:"configMap,omitempty"`
		EmptyDir *struct {
			Medium    string `json:"medium,omitempty"`
			SizeLimit string `json:"sizeLimit,omitempty"`
		} `json:"emptyDir,omitempty"`
		Secret *struct {
			SecretName  string `json:"secretName"`
			DefaultMode *int32 `json:"defaultMode,omitempty"`
		} `json:"secret,omitempty"`
	}
	policyRule struct {
		APIGroups     []string `json:"apiGroups"`
		Resources     []string `json:"resources"`
		Verbs         []string `json:"verbs"`
		ResourceNames []string `json:"resourceNames,omitempty"`
	}
	roleRef struct {
		APIGroup string `json:"apiGroup"`
		Kind     string `json:"kind"`
		Name     string `json:"name"`
	}
	subject struct {
		Kind      string `json:"kind"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	}
)

// manifests holds the example's objects by kind (one each).
type manifests map[string]*object

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// readManifests parses every .yaml file of dir (documents separated by ---) and returns the
// objects by kind; each kind must appear once. The Strimzi KafkaTopics of topics.yaml are
// left out (readTopics reads them).
func readManifests(t *testing.T, dir string) manifests {
	t.Helper()
	m := parseManifests(t, dir)
	for _, kind := range []string{"Deployment", "ConfigMap", "Secret", "ServiceAccount", "Role", "RoleBinding"} {
		if m[kind] == nil {
			t.Fatalf("%s holds no %s", dir, kind)
		}
	}
	return m
}

// parseManifests is readManifests without the kinds it requires.
func parseManifests(t *testing.T, dir string) manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	m := manifests{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSep.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			if kindOf(doc) == kafkaTopicKind {
				continue
			}
			o := &object{file: filepath.Base(f)}
			if err := yaml.UnmarshalStrict([]byte(doc), o); err != nil {
				t.Fatalf("%s document %d: %v (a field this test does not know is an error: add it to the types in deploy_test.go with its check)", f, i+1, err)
			}
			if prev, dup := m[o.Kind]; dup {
				t.Fatalf("%s: a second %s (the first is in %s); the example has one of each kind", f, o.Kind, prev.file)
			}
			m[o.Kind] = o
		}
	}
	return m
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// containerNamed returns the pod's container called name.
func (m manifests) containerNamed(t *testing.T, name string) *container {
	t.Helper()
	for i, c := range m["Deployment"].Spec.Template.Spec.Containers {
		if c.Name == name {
			return &m["Deployment"].Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("the Deployment has no container named %q", name)
	return nil
}

func (m manifests) volume(name string) *volume {
	for i, v := range m["Deployment"].Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &m["Deployment"].Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

// serviceAccountCA is where Kubernetes mounts the service account's CA, which the sidecar reads
// to post its events.
const serviceAccountCA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

// fakePod is the pod the downward API describes in these tests.
var fakePod = struct{ Name, UID string }{Name: "score-listing-5f7c9d8b6d-x2x9q", UID: "0d3c1f1e-6a4b-4c39-9f7e-3f1b2a9c8d7e"}

// containerEnv returns the container's environment as the kubelet would give it: literal
// values, the downward API's fields of fakePod (namespace: the Deployment's), and the service
// variables every pod gets. Each variable must be set once.
func (m manifests) containerEnv(t *testing.T, c *container) map[string]string {
	t.Helper()
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
	fields := map[string]string{
		"metadata.name":      fakePod.Name,
		"metadata.namespace": m["Deployment"].Metadata.Namespace,
		"metadata.uid":       fakePod.UID,
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			t.Errorf("container %s sets %s twice; Kubernetes keeps the last silently: set it once", c.Name, e.Name)
		}
		seen[e.Name] = true
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Errorf("container %s: %s comes from fieldPath %q, which this test does not fake (metadata.name, metadata.namespace, metadata.uid)", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		default:
			t.Errorf("container %s: %s has a valueFrom this test does not know", c.Name, e.Name)
		}
	}
	return env
}

// recorder is a getenv over env that records every name asked for.
type recorder struct {
	env  map[string]string
	read map[string]bool
}

func newRecorder(env map[string]string) *recorder {
	return &recorder{env: env, read: map[string]bool{}}
}

func (r *recorder) getenv(name string) string {
	r.read[name] = true
	return r.env[name]
}

// unread returns the names of the container's own variables (not the kubelet's) that nothing
// read. GOMEMLIMIT is the Go runtime's (TestKubernetesMemory checks it).
func (r *recorder) unread(c *container) []string {
	var out []string
	for _, e := range c.Env {
		if !r.read[e.Name] && e.Name != envGoMemLimit {
			out = append(out, e.Name)
		}
	}
	return out
}

// selfSignedPEM returns a CA certificate in PEM, as the service account's ca.crt.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubernetes"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// containerFiles returns a readFile over what the container sees of the manifests: each
// ConfigMap volume's keys as files under its mount path, and the service account's CA.
func (m manifests) containerFiles(t *testing.T, c *container) func(string) ([]byte, error) {
	t.Helper()
	files := map[string][]byte{serviceAccountCA: selfSignedPEM(t)}
	for _, vm := range c.VolumeMounts {
		v := m.volume(vm.Name)
		if v == nil {
			t.Errorf("container %s mounts volume %q, which the pod does not declare", c.Name, vm.Name)
			continue
		}
		if v.Secret != nil {
			for key, value := range m.secretFiles(t, v) {
				files[path.Join(vm.MountPath, key)] = value
			}
			continue
		}
		if v.ConfigMap == nil {
			continue
		}
		cm := m["ConfigMap"]
		if v.ConfigMap.Name != cm.Metadata.Name {
			t.Errorf("volume %s is ConfigMap %q; the example's ConfigMap is %q", v.Name, v.ConfigMap.Name, cm.Metadata.Name)
			continue
		}
		for key, value := range cm.Data {
			files[path.Join(vm.MountPath, key)] = []byte(value)
		}
	}
	return func(name string) ([]byte, error) {
		if b, ok := files[name]; ok {
			return b, nil
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
}

// mountFor returns the container's mount that holds dir (the deepest) and its volume, or nils.
func (m manifests) mountFor(c *container, dir string) (*volumeMount, *volume) {
	var best *volumeMount
	for i, vm := range c.VolumeMounts {
		under := dir == vm.MountPath || strings.HasPrefix(dir, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if under && (best == nil || len(vm.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	if best == nil {
		return nil, nil
	}
	return best, m.volume(best.Name)
}

// writable reports whether the container may create files in dir: it is in an emptyDir
// mounted read-write.
func (m manifests) writable(c *container, dir string) bool {
	vm, v := m.mountFor(c, dir)
	return vm != nil && v != nil && v.EmptyDir != nil && !vm.ReadOnly
}

// bridgeAction returns the action the bridge container serves: its arguments after "bridge",
// else MILLRACE_ACTION.
func bridgeAction(t *testing.T, c *container, env map[string]string) *actionconf.Action {
	t.Helper()
	if len(c.Command) > 0 && !slices.Equal(c.Command, []string{binaryName}) {
		t.Fatalf("container %s: command %q; leave it to the image's entrypoint (%s) or set [%q]", c.Name, c.Command, binaryName, binaryName)
	}
	if len(c.Args) == 0 || c.Args[0] != "bridge" {
		t.Fatalf("container %s: args %q; want [bridge …]", c.Name, c.Args)
	}
	words := c.Args[1:]
	var (
		a   *actionconf.Action
		err error
	)
	switch {
	case len(words) > 0 && env[actionconf.EnvAction] != "":
		t.Fatalf("container %s gives the action line both as arguments and in %s: the arguments win silently; keep one", c.Name, actionconf.EnvAction)
	case len(words) > 0 && strings.HasPrefix(words[0], "-"):
		t.Fatalf("container %s: bridge %q; give the action line itself (as arguments or in %s) so this test can check it against the descriptor", c.Name, words, actionconf.EnvAction)
	case len(words) > 0:
		a, err = actionconf.ParseLine(words)
	default:
		a, err = actionconf.FromEnv(func(k string) string { return env[k] })
	}
	if err != nil {
		t.Fatalf("container %s: the action line does not parse: %v", c.Name, err)
	}
	return a
}

// millraceImageTag returns the tag of the millrace image the Python example builds on: the
// version of millrace in the action's image, which writes the descriptor's sdk.version.
func millraceImageTag(t *testing.T) string {
	t.Helper()
	for _, in := range readDockerfile(t, pythonExample) {
		if in.cmd != "ARG" {
			continue
		}
		if v, ok := strings.CutPrefix(in.args, "MILLRACE_IMAGE="); ok {
			if i := strings.LastIndex(v, ":"); i > 0 && !strings.Contains(v[i:], "/") {
				return v[i+1:]
			}
			t.Fatalf("%s: MILLRACE_IMAGE=%s has no tag; pin the millrace version", pythonExample, v)
		}
	}
	t.Fatalf("%s declares no ARG MILLRACE_IMAGE=<image:tag>", pythonExample)
	return ""
}

// descriptorConfigMap is configmap.yaml for the descriptor bytes: what -update-deploy writes.
// sameAs says what else prints them, test which test writes and checks the file.
func descriptorConfigMap(cm *object, version, sameAs, test string, descriptor []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `# The deployed descriptor of the streamlet in deployment.yaml: what millrace %s (the image's)
# prints for the bridge container's action line with `+"`millrace describe LINE`"+`, %s.
# The sidecar checks the bridge's Discover answer against it. Written by
#   go test ./cmd/millrace -run %s -update-deploy
# and checked by the same test without the flag, so it cannot drift from the action line.
apiVersion: v1
kind: ConfigMap
metadata:
  name: %s
  namespace: %s
data:
  %s: |
    %s
`, version, sameAs, test, cm.Metadata.Name, cm.Metadata.Namespace, descriptorKey, descriptor)
	return b.Bytes()
}

// secretFiles are the files of a Secret volume: the example Secret's keys, a certificate's
// placeholder (a .crt key) replaced by a PEM certificate the test makes, as a deployer puts
// in the CA.
func (m manifests) secretFiles(t *testing.T, v *volume) map[string][]byte {
	t.Helper()
	sec := m["Secret"]
	if v.Secret.SecretName != sec.Metadata.Name {
		t.Errorf("volume %s is Secret %q; the example's Secret is %q", v.Name, v.Secret.SecretName, sec.Metadata.Name)
		return nil
	}
	files := map[string][]byte{}
	for key, value := range sec.StringData {
		files[key] = []byte(value)
		if strings.HasSuffix(key, ".crt") {
			files[key] = selfSignedPEM(t)
		}
	}
	return files
}
