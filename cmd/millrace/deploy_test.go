package main

// The packaging checks: the Dockerfile's build command builds the binary the image ships, and
// the Kubernetes example (deploy/kubernetes) agrees with what the binary reads, so neither can
// drift from the code. No container engine is needed: the Dockerfile's RUN line is run here,
// and the manifests are parsed and fed to the same functions the binary calls.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/protocol"
	"github.com/ankka-flow/millrace/sidecar"
	"github.com/ankka-flow/millrace/sidecar/kube"
)

// updateDeploy rewrites deploy/kubernetes/configmap.yaml from the Deployment's action line.
var updateDeploy = flag.Bool("update-deploy", false, "rewrite deploy/kubernetes/configmap.yaml from the action line in deployment.yaml")

const (
	repoRoot       = "../.."
	dockerfile     = repoRoot + "/Dockerfile"
	pythonExample  = repoRoot + "/deploy/examples/python/Dockerfile"
	manifestsDir   = repoRoot + "/deploy/kubernetes"
	configMapFile  = manifestsDir + "/configmap.yaml"
	exampleAction  = repoRoot + "/actions/score-listing/action.conf"
	descriptorKey  = "descriptor.json"
	buildOutput    = "millrace" // scripts/build's default OUT, relative to the build stage's WORKDIR
	binaryName     = "millrace"
	distrolessPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line  int    // where it starts, from 1
	cmd   string // the keyword, upper case
	args  string // the rest
	stage string // the name of the stage it belongs to (AS name, else its index)
}

// readDockerfile splits a Dockerfile into instructions: comments and blank lines dropped,
// lines ending in a backslash joined with the next.
func readDockerfile(t *testing.T, name string) []instruction {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var (
		out   []instruction
		cur   *instruction
		stage string
		n     int
	)
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		cont := strings.HasSuffix(trimmed, `\`)
		trimmed = strings.TrimSpace(strings.TrimSuffix(trimmed, `\`))
		if cur == nil {
			cmd, rest, _ := strings.Cut(trimmed, " ")
			cur = &instruction{line: i + 1, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(rest)}
			if cur.cmd == "FROM" {
				f := strings.Fields(cur.args)
				stage = strconv.Itoa(n)
				if len(f) >= 3 && strings.EqualFold(f[len(f)-2], "AS") {
					stage = f[len(f)-1]
				}
				n++
			}
			cur.stage = stage
		} else {
			cur.args += " " + trimmed
		}
		if !cont {
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		t.Fatalf("%s: the instruction on line %d ends in a backslash with nothing after it", name, cur.line)
	}
	return out
}

// stageOf returns the instructions of one stage, FROM first.
func stageOf(ins []instruction, stage string) []instruction {
	var out []instruction
	for _, in := range ins {
		if in.stage == stage {
			out = append(out, in)
		}
	}
	return out
}

// withoutFlags drops the leading --flag=value words of a RUN or COPY (--mount=…, --from=…)
// and returns them apart.
func withoutFlags(args string) (flags []string, rest string) {
	rest = strings.TrimSpace(args)
	for strings.HasPrefix(rest, "--") {
		word, after, _ := strings.Cut(rest, " ")
		flags = append(flags, word)
		rest = strings.TrimSpace(after)
	}
	return flags, rest
}

// lastOf returns the last instruction cmd in ins, and whether there is one.
func lastOf(ins []instruction, cmd string) (instruction, bool) {
	for i := len(ins) - 1; i >= 0; i-- {
		if ins[i].cmd == cmd {
			return ins[i], true
		}
	}
	return instruction{}, false
}

// execForm reads the JSON array form of ENTRYPOINT or CMD.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var words []string
	if err := json.Unmarshal([]byte(in.args), &words); err != nil {
		t.Fatalf("line %d: %s %s is not the exec (JSON array) form, which needs no shell: %v", in.line, in.cmd, in.args, err)
	}
	return words
}

// checkNonRootUser checks a stage's last USER: a numeric uid other than 0, so that Kubernetes'
// runAsNonRoot can verify it without reading /etc/passwd.
func checkNonRootUser(t *testing.T, name string, stage []instruction) {
	t.Helper()
	u, ok := lastOf(stage, "USER")
	if !ok {
		t.Errorf("%s: the final stage sets no USER; it would run as root: add USER 65532:65532", name)
		return
	}
	uid, _, _ := strings.Cut(u.args, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("%s line %d: USER %s; want a numeric non-root uid (e.g. 65532:65532) so runAsNonRoot can check it", name, u.line, u.args)
	}
}

// TestDockerfileBuild runs the Dockerfile's build command (its one RUN of scripts/build, as
// written, with the build arguments Docker would pass) and checks the binary it makes: static,
// -trimpath, version stamped, and the readiness check that needs no shell. It also checks the
// runtime stage: the binary copied from where the build put it, on the PATH, the entrypoint,
// a non-root user.
func TestDockerfileBuild(t *testing.T) {
	ins := readDockerfile(t, dockerfile)
	build := stageOf(ins, "build")
	if len(build) == 0 {
		t.Fatalf("%s has no stage named build (FROM … AS build)", dockerfile)
	}
	var runs []instruction
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "scripts/build") {
			runs = append(runs, in)
		}
	}
	if len(runs) != 1 {
		t.Fatalf("%s: %d RUN lines of the build stage call scripts/build; want exactly one, so the build command lives in scripts/build only", dockerfile, len(runs))
	}
	_, command := withoutFlags(runs[0].args)
	workdir, ok := lastOf(build, "WORKDIR")
	if !ok {
		t.Fatalf("%s: the build stage has no WORKDIR", dockerfile)
	}
	args := map[string]bool{}
	for _, in := range build {
		if in.cmd == "ARG" {
			for _, a := range strings.Fields(in.args) {
				name, _, _ := strings.Cut(a, "=")
				args[name] = true
			}
		}
	}
	for _, want := range []string{"VERSION", "TARGETOS", "TARGETARCH"} {
		if !args[want] {
			t.Errorf("%s: the build stage declares no ARG %s, so the RUN line cannot see it", dockerfile, want)
		}
	}

	// The runtime stage: the last FROM.
	from, _ := lastOf(ins, "FROM")
	final := stageOf(ins, from.stage)
	var dest string
	for _, in := range final {
		if in.cmd != "COPY" {
			continue
		}
		flags, rest := withoutFlags(in.args)
		if !slices.Contains(flags, "--from=build") {
			continue
		}
		f := strings.Fields(rest)
		if want := path.Join(workdir.args, buildOutput); len(f) != 2 || f[0] != want {
			t.Errorf("%s line %d: COPY %s; want COPY --from=build %s <dest>, where scripts/build puts the binary", dockerfile, in.line, in.args, want)
			continue
		}
		dest = f[1]
	}
	if dest == "" {
		t.Fatalf("%s: the runtime stage copies no binary from the build stage", dockerfile)
	}
	if path.Base(dest) != binaryName || !slices.Contains(strings.Split(distrolessPath, ":"), path.Dir(dest)) {
		t.Errorf("%s: the binary goes to %s; want %s in a folder on the image's PATH (%s), so probes can run %q", dockerfile, dest, binaryName, distrolessPath, binaryName)
	}
	if ep, ok := lastOf(final, "ENTRYPOINT"); !ok {
		t.Errorf("%s: the runtime stage has no ENTRYPOINT", dockerfile)
	} else if got := execForm(t, ep); !slices.Equal(got, []string{binaryName}) {
		t.Errorf("%s line %d: ENTRYPOINT %q; want [%q]", dockerfile, ep.line, got, binaryName)
	}
	checkNonRootUser(t, dockerfile, final)

	// Run the RUN line as Docker would: sh -c in the build context (the repository), with the
	// build arguments in the environment. OUT sends the binary to a temporary folder instead of
	// the repository.
	bin := filepath.Join(t.TempDir(), binaryName)
	const stamp = "9.8.7-deploytest"
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH, "VERSION="+stamp, "OUT="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build command %q failed: %v\n%s", command, err, out)
	}

	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("reading the build information of %s: %v", bin, err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for key, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"} {
		if got := settings[key]; got != want {
			t.Errorf("the binary's build setting %s = %q; want %q", key, got, want)
		}
	}
	// -trimpath keeps -ldflags out of the build information (go.dev/issue/52372); the stamped
	// version is checked below with `millrace version`.
	if runtime.GOOS == "linux" {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a dynamic loader (PT_INTERP); want a static binary for distroless/static", bin)
			}
		}
		f.Close()
	}

	run := func(env []string, args ...string) (string, int) {
		t.Helper()
		c := exec.Command(bin, args...)
		c.Env = env
		out, err := c.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &exit):
			return string(out), exit.ExitCode()
		}
		t.Fatalf("running %s %q: %v", bin, args, err)
		return "", 0
	}
	if out, code := run(nil, "version"); code != 0 || !strings.HasPrefix(out, "millrace "+stamp+" ") {
		t.Errorf("millrace version = %q, exit %d; want \"millrace %s (protocol …)\", exit 0", out, code, stamp)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	env := []string{"FLOW_READINESS_FILE=" + ready}
	if out, code := run(env, "sidecar", "ready-check"); code != 1 || !strings.Contains(out, ready) {
		t.Errorf("millrace sidecar ready-check without the readiness file = %q, exit %d; want exit 1 naming %s", out, code, ready)
	}
	if err := os.WriteFile(ready, []byte("conversation\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(env, "sidecar", "ready-check"); code != 0 {
		t.Errorf("millrace sidecar ready-check with the readiness file = %q, exit %d; want exit 0", out, code)
	}
}

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
// objects by kind; each kind must appear once.
func readManifests(t *testing.T, dir string) manifests {
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
	for _, kind := range []string{"Deployment", "ConfigMap", "ServiceAccount", "Role", "RoleBinding"} {
		if m[kind] == nil {
			t.Fatalf("%s holds no %s", dir, kind)
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

// fakePod is the pod the downward API describes in these tests.
var fakePod = kube.Pod{Name: "score-listing-5f7c9d8b6d-x2x9q", UID: "0d3c1f1e-6a4b-4c39-9f7e-3f1b2a9c8d7e"}

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
// read.
func (r *recorder) unread(c *container) []string {
	var out []string
	for _, e := range c.Env {
		if !r.read[e.Name] {
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
	files := map[string][]byte{kube.DefaultCAFile: selfSignedPEM(t)}
	for _, vm := range c.VolumeMounts {
		v := m.volume(vm.Name)
		if v == nil {
			t.Errorf("container %s mounts volume %q, which the pod does not declare", c.Name, vm.Name)
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
func bridgeAction(t *testing.T, c *container, env map[string]string) *bridge.Action {
	t.Helper()
	if len(c.Command) > 0 && !slices.Equal(c.Command, []string{binaryName}) {
		t.Fatalf("container %s: command %q; leave it to the image's entrypoint (%s) or set [%q]", c.Name, c.Command, binaryName, binaryName)
	}
	if len(c.Args) == 0 || c.Args[0] != "bridge" {
		t.Fatalf("container %s: args %q; want [bridge …]", c.Name, c.Args)
	}
	words := c.Args[1:]
	var (
		a   *bridge.Action
		err error
	)
	switch {
	case len(words) > 0 && env[bridge.EnvAction] != "":
		t.Fatalf("container %s gives the action line both as arguments and in %s: the arguments win silently; keep one", c.Name, bridge.EnvAction)
	case len(words) > 0 && strings.HasPrefix(words[0], "-"):
		t.Fatalf("container %s: bridge %q; give the action line itself (as arguments or in %s) so this test can check it against the descriptor", c.Name, words, bridge.EnvAction)
	case len(words) > 0:
		a, err = bridge.ParseLine(words)
	default:
		a, err = bridge.FromEnv(func(k string) string { return env[k] })
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
func descriptorConfigMap(cm *object, version string, descriptor []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `# The deployed descriptor of the streamlet in deployment.yaml: what millrace %s (the image's)
# prints for the bridge container's action line with `+"`millrace describe LINE`"+`, the same as
# `+"`millrace describe actions/score-listing`"+`. The sidecar checks the bridge's Discover answer
# against it. Written by
#   go test ./cmd/millrace -run TestKubernetesExample -update-deploy
# and checked by the same test without the flag, so it cannot drift from the action line.
apiVersion: v1
kind: ConfigMap
metadata:
  name: %s
  namespace: %s
data:
  %s: |
    %s
`, version, cm.Metadata.Name, cm.Metadata.Namespace, descriptorKey, descriptor)
	return b.Bytes()
}

// TestKubernetesExample checks deploy/kubernetes against the code: the sidecar's variables are
// ones it reads and make a valid configuration with the ConfigMap's descriptor and the pod's
// downward API; the bridge's action line parses and is the example action's; the descriptor is
// what the code makes of that line; ports, paths and the probe agree; RBAC is create on events
// only; the pod runs one image as a non-root user.
func TestKubernetesExample(t *testing.T) {
	m := readManifests(t, manifestsDir)
	dep := m["Deployment"]
	pod := &dep.Spec.Template.Spec
	sc, br := m.containerNamed(t, "sidecar"), m.containerNamed(t, "bridge")
	if len(pod.Containers) != 2 {
		t.Errorf("the pod has %d containers; want 2, sidecar and bridge", len(pod.Containers))
	}
	scEnv, brEnv := m.containerEnv(t, sc), m.containerEnv(t, br)
	a := bridgeAction(t, br, brEnv)

	t.Run("descriptor", func(t *testing.T) {
		conf, err := bridge.ParseFile(exampleAction)
		if err != nil {
			t.Fatal(err)
		}
		// The pod adds where the bridge serves its metrics (--metrics), a deployment's choice.
		podLine := *a
		podLine.Metrics = ""
		if got, want := podLine.Line(), conf.Line(); got != want {
			t.Errorf("the bridge container's action line = %s; want the one of %s: %s", got, exampleAction, want)
		}
		imageVersion := millraceImageTag(t)
		descriptor, err := protocol.MarshalDescriptor(a.Spec(imageVersion))
		if err != nil {
			t.Fatal(err)
		}
		// `millrace describe LINE` from the image's millrace prints the same bytes.
		defer func(v string) { version = v }(version)
		version = imageVersion
		for _, arg := range []string{bridge.Join(br.Args[1:]), filepath.Dir(exampleAction)} {
			var stdout, stderr bytes.Buffer
			if code := dispatch(context.Background(), &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}, []string{"describe", arg}); code != 0 || stdout.String() != string(descriptor) {
				t.Errorf("millrace describe %s = exit %d %q %q; want exit 0 and the bridge's Spec as descriptor.json:\n%s", arg, code, stdout.String(), stderr.String(), descriptor)
			}
		}
		cm := m["ConfigMap"]
		if *updateDeploy {
			if err := os.WriteFile(configMapFile, descriptorConfigMap(cm, imageVersion, descriptor), 0o644); err != nil {
				t.Fatal(err)
			}
			m = readManifests(t, manifestsDir)
			cm = m["ConfigMap"]
		}
		if got := cm.Data[descriptorKey]; strings.TrimSuffix(got, "\n") != string(descriptor) {
			t.Errorf("ConfigMap %s %s =\n%s\nwant what the code makes of the bridge's action line (rewrite it: go test ./cmd/millrace -run TestKubernetesExample -update-deploy):\n%s", cm.Metadata.Name, descriptorKey, got, descriptor)
		}
		if len(cm.Data) != 1 {
			t.Errorf("ConfigMap %s holds %d keys; want only %s", cm.Metadata.Name, len(cm.Data), descriptorKey)
		}
	})

	// The sidecar's configuration, as `millrace sidecar` reads it in the pod.
	rec := newRecorder(scEnv)
	cfg, err := sidecar.ConfigFromEnv(rec.getenv, m.containerFiles(t, sc))
	if err != nil {
		t.Fatalf("sidecar.ConfigFromEnv(the sidecar container's environment and files) = %v; want no problem", err)
	}

	t.Run("sidecar", func(t *testing.T) {
		if len(sc.Args) == 0 || sc.Args[0] != "sidecar" || len(sc.Command) > 0 && !slices.Equal(sc.Command, []string{binaryName}) {
			t.Errorf("container sidecar: command %q args %q; want args [sidecar …] with the image's entrypoint", sc.Command, sc.Args)
		}
		// With an empty environment, `millrace sidecar` with the container's arguments gets past
		// its flags and stops at the configuration (exit 1, naming FLOW_BROKERS), before it
		// starts anything; a bad argument would be a usage error (exit 2).
		var stdout, stderr bytes.Buffer
		noEnv := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
		if code := dispatch(context.Background(), noEnv, sc.Args); code != 1 || !strings.Contains(stderr.String(), "FLOW_BROKERS") {
			t.Errorf("millrace %q with no environment = exit %d %q; want exit 1 naming FLOW_BROKERS: arguments the sidecar accepts", sc.Args, code, stderr.String())
		}
		if cfg.Streamlet != a.Name {
			t.Errorf("FLOW_STREAMLET = %q; want the action's name %q", cfg.Streamlet, a.Name)
		}
		if cfg.Events == nil {
			t.Error("in a cluster the sidecar posts no events; want a kube client for stall warnings")
		} else if got, want := cfg.Events.Pod(), (kube.Pod{Name: fakePod.Name, Namespace: dep.Metadata.Namespace, UID: fakePod.UID}); got != want {
			t.Errorf("the sidecar's events are about pod %+v; want the downward API's %+v", got, want)
		}
		// ConfigFromEnv could read the descriptor only through the ConfigMap's mount; this names
		// the mistake when it could not.
		dir := path.Dir(cfg.DescriptorPath)
		if vm, v := m.mountFor(sc, dir); vm == nil || v == nil || v.ConfigMap == nil || vm.MountPath != dir || path.Base(cfg.DescriptorPath) != descriptorKey {
			t.Errorf("FLOW_DESCRIPTOR = %s; want %s right under the mount path of the ConfigMap's volume", cfg.DescriptorPath, descriptorKey)
		}
	})

	t.Run("readiness probe", func(t *testing.T) {
		p := sc.ReadinessProbe
		if p == nil || p.Exec == nil || len(p.Exec.Command) < 2 || p.Exec.Command[0] != binaryName {
			t.Fatalf("container sidecar: readiness probe %+v; want exec [%s sidecar ready-check]", p, binaryName)
		}
		if !m.writable(sc, path.Dir(cfg.ReadinessFile)) {
			t.Errorf("the readiness file %s is not in a writable emptyDir of the sidecar container; the sidecar could not create it", cfg.ReadinessFile)
		}
		// Run the probe's command with the container's environment, its paths under a
		// temporary root: it must fail until FLOW_READINESS_FILE exists, and pass once it does.
		root := t.TempDir()
		probeEnv := func(k string) string {
			v := rec.getenv(k)
			if k == "FLOW_READINESS_FILE" && v != "" {
				return filepath.Join(root, v)
			}
			return v
		}
		ready := filepath.Join(root, cfg.ReadinessFile)
		probe := func() (int, string) {
			var out, errOut bytes.Buffer
			code := dispatch(context.Background(), &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: probeEnv}, p.Exec.Command[1:])
			return code, errOut.String()
		}
		if code, stderr := probe(); code != 1 || !strings.Contains(stderr, ready) {
			t.Errorf("the probe %q before the sidecar is ready = exit %d %q; want exit 1 naming %s", p.Exec.Command, code, stderr, ready)
		}
		if err := os.MkdirAll(filepath.Dir(ready), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ready, []byte("c\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, stderr := probe(); code != 0 {
			t.Errorf("the probe %q once the readiness file exists = exit %d %q; want exit 0", p.Exec.Command, code, stderr)
		}
	})

	t.Run("sidecar variables", func(t *testing.T) {
		// After ConfigFromEnv and the probe, rec has seen every name `millrace sidecar` reads.
		if unread := rec.unread(sc); len(unread) > 0 {
			t.Errorf("the sidecar container sets %s, which the sidecar never reads (a typo, or a variable that does not exist)", strings.Join(unread, ", "))
		}
	})

	t.Run("bridge", func(t *testing.T) {
		brRec := newRecorder(brEnv)
		port, err := bridge.PortFromEnv(brRec.getenv)
		if err != nil {
			t.Fatalf("container bridge: %v", err)
		}
		_, _ = bridge.FromEnv(brRec.getenv) // only the names it reads matter here
		if unread := brRec.unread(br); len(unread) > 0 {
			t.Errorf("the bridge container sets %s, which the bridge never reads", strings.Join(unread, ", "))
		}
		if port != cfg.ProcessPort {
			t.Errorf("the bridge listens on port %d and the sidecar dials %d (FLOW_PROCESS_PORT): set the same in both containers", port, cfg.ProcessPort)
		}
		if scEnv[protocol.EnvProcessPort] == "" || brEnv[protocol.EnvProcessPort] == "" {
			t.Errorf("%s is set in the sidecar (%q) and the bridge (%q); set it in both, so they cannot disagree by default", protocol.EnvProcessPort, scEnv[protocol.EnvProcessPort], brEnv[protocol.EnvProcessPort])
		}
		// Each action process gets a MILLSTREAM_WORKDIR in the temporary folder.
		tmp := "/tmp"
		if v := brEnv["TMPDIR"]; v != "" {
			tmp = v
		}
		if s := br.SecurityContext; s != nil && s.ReadOnlyRootFilesystem != nil && *s.ReadOnlyRootFilesystem && !m.writable(br, tmp) {
			t.Errorf("the bridge container's root filesystem is read-only and %s is not in a writable emptyDir: the action's MILLSTREAM_WORKDIR cannot be made", tmp)
		}
	})

	t.Run("action image", func(t *testing.T) {
		ex := readDockerfile(t, pythonExample)
		if wd, ok := lastOf(ex, "WORKDIR"); !ok || wd.args != br.WorkingDir {
			t.Errorf("the bridge container's workingDir %q is not the example image's WORKDIR %q, where its program is", br.WorkingDir, wd.args)
		}
		program := a.Command[len(a.Command)-1]
		copied := false
		for _, in := range ex {
			if flags, rest := withoutFlags(in.args); in.cmd == "COPY" && len(flags) == 0 {
				f := strings.Fields(rest)
				for _, src := range f[:len(f)-1] {
					if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
						t.Errorf("%s line %d copies %s: %v", pythonExample, in.line, src, err)
					}
					copied = copied || path.Base(src) == program
				}
			}
		}
		if !copied {
			t.Errorf("%s does not copy the action's program %s into the image", pythonExample, program)
		}
		from, _ := lastOf(ex, "FROM")
		final := stageOf(ex, from.stage)
		checkNonRootUser(t, pythonExample, final)
		if ep, ok := lastOf(final, "ENTRYPOINT"); !ok || !slices.Equal(execForm(t, ep), []string{binaryName}) {
			t.Errorf("%s: the action's image needs ENTRYPOINT [%q], so the pod's args are millrace's", pythonExample, binaryName)
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		grace := 30 * time.Second // Kubernetes' default
		if pod.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
		}
		if grace <= cfg.ShutdownTimeout || grace <= protocol.StopTimeout {
			t.Errorf("terminationGracePeriodSeconds %v is not longer than the sidecar's FLOW_SHUTDOWN_TIMEOUT %v and the bridge's drain %v", grace, cfg.ShutdownTimeout, protocol.StopTimeout)
		}
	})

	t.Run("image and user", func(t *testing.T) {
		if sc.Image == "" || sc.Image != br.Image {
			t.Errorf("the sidecar runs image %q and the bridge %q; want one image (the action's, which holds millrace)", sc.Image, br.Image)
		}
		psc := pod.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			got, _ := json.Marshal(psc)
			t.Errorf("the pod's securityContext = %s; want runAsNonRoot: true and a non-zero runAsUser", got)
		}
		for _, c := range []*container{sc, br} {
			s := c.SecurityContext
			if s != nil && s.RunAsUser != nil && *s.RunAsUser == 0 {
				t.Errorf("container %s runs as root (runAsUser: 0)", c.Name)
			}
			if s == nil || s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation {
				t.Errorf("container %s: want allowPrivilegeEscalation: false", c.Name)
			}
		}
		for k, v := range dep.Spec.Selector.MatchLabels {
			if dep.Spec.Template.Metadata.Labels[k] != v {
				t.Errorf("the Deployment's selector %s=%s does not match its pod template's labels", k, v)
			}
		}
	})

	t.Run("rbac", func(t *testing.T) {
		sa, role, rb := m["ServiceAccount"], m["Role"], m["RoleBinding"]
		ns := dep.Metadata.Namespace
		for _, o := range []*object{m["ConfigMap"], sa, role, rb} {
			if o.Metadata.Namespace != ns {
				t.Errorf("%s %s is in namespace %q; the Deployment is in %q", o.Kind, o.Metadata.Name, o.Metadata.Namespace, ns)
			}
		}
		if pod.ServiceAccountName != sa.Metadata.Name {
			t.Errorf("the pod's serviceAccountName = %q; want %q", pod.ServiceAccountName, sa.Metadata.Name)
		}
		if pod.Automount != nil && !*pod.Automount || sa.Automount != nil && !*sa.Automount {
			t.Error("the service account token is not mounted; the sidecar cannot post stall warnings")
		}
		// The sidecar posts to /api/v1/namespaces/NS/events: the core group, verb create.
		want := []policyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}}
		if !reflect.DeepEqual(role.Rules, want) {
			t.Errorf("Role %s rules = %+v; want exactly %+v", role.Metadata.Name, role.Rules, want)
		}
		if want := (roleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Metadata.Name}); rb.RoleRef == nil || *rb.RoleRef != want {
			t.Errorf("RoleBinding %s roleRef = %+v; want %+v", rb.Metadata.Name, rb.RoleRef, want)
		}
		if want := (subject{Kind: "ServiceAccount", Name: sa.Metadata.Name, Namespace: ns}); len(rb.Subjects) != 1 || rb.Subjects[0] != want {
			t.Errorf("RoleBinding %s subjects = %+v; want only %+v", rb.Metadata.Name, rb.Subjects, want)
		}
	})
}
