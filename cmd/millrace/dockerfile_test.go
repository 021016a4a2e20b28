package main

// The packaging checks of the image: the Dockerfile's build command builds the binary the image
// ships (no container engine needed: the Dockerfile's RUN line is run here). The Kubernetes
// example's are in kube_test.go, the manifests' decoding in kube_manifests_test.go.

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

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
