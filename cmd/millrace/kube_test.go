package main

// The Kubernetes example's checks: deploy/kubernetes agrees with what the binary reads (the
// manifests, kube_manifests_test.go, fed to the same functions the binary calls), so it cannot
// drift from the code.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/bridge/actionconf"
	"github.com/ankka-flow/millrace/protocol"
	"github.com/ankka-flow/millrace/sidecar"
)

// updateDeploy rewrites deploy/kubernetes/configmap.yaml from the Deployment's action line.
var updateDeploy = flag.Bool("update-deploy", false, "rewrite deploy/kubernetes/configmap.yaml from the action line in deployment.yaml")

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
		conf, err := actionconf.ParseFile(exampleAction)
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
		for _, arg := range []string{actionconf.Join(br.Args[1:]), filepath.Dir(exampleAction)} {
			var stdout, stderr bytes.Buffer
			if code := dispatch(context.Background(), &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}, []string{"describe", arg}); code != 0 || stdout.String() != string(descriptor)+"\n" {
				t.Errorf("millrace describe %s = exit %d %q %q; want exit 0 and the bridge's Spec as descriptor.json:\n%s", arg, code, stdout.String(), stderr.String(), descriptor)
			}
		}
		cm := m["ConfigMap"]
		if *updateDeploy {
			if err := os.WriteFile(configMapFile, descriptorConfigMap(cm, imageVersion, "the same as `millrace describe actions/score-listing`", "TestKubernetesExample", descriptor), 0o644); err != nil {
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
		} else if got := cfg.Events.Pod(); got.Name != fakePod.Name || got.Namespace != dep.Metadata.Namespace || got.UID != fakePod.UID {
			t.Errorf("the sidecar's events are about pod %+v; want the downward API's name %q, namespace %q, uid %q", got, fakePod.Name, dep.Metadata.Namespace, fakePod.UID)
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
		bcfg, err := bridge.ConfigFromEnv(brRec.getenv)
		if err != nil {
			t.Fatalf("container bridge: %v", err)
		}
		port := bcfg.Port
		_, _ = actionconf.FromEnv(brRec.getenv) // only the names it reads matter here
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
