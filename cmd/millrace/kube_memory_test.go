package main

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/bridge"
	"github.com/ankka-flow/millrace/sidecar"
)

// envGoMemLimit is the Go runtime's soft memory limit (runtime/debug.SetMemoryLimit), which
// the manifests set for each container; the binary itself never reads it.
const envGoMemLimit = "GOMEMLIMIT"

// TestKubernetesMemory checks the memory settings of deploy/kubernetes: each container
// requests the memory it is limited to, and sets GOMEMLIMIT (as the runtime parses it) at
// most three quarters of that limit, so what is not Go heap has room, and above what the
// process may hold by its own budgets, so the GC is not made to run back to back at them:
// the sidecar's held emits, the bridge's held output, each with 32 MiB for the rest.
func TestKubernetesMemory(t *testing.T) {
	m := readManifests(t, manifestsDir)
	for _, c := range []struct {
		name   string
		budget int64
	}{
		{"sidecar", sidecar.DefaultMaxHeldEmitBytes},
		{"bridge", bridge.DefaultMaxHeldBytes},
	} {
		ct := m.containerNamed(t, c.name)
		env := m.containerEnv(t, ct)
		req, lim := ct.Resources.Requests["memory"], ct.Resources.Limits["memory"]
		limit, err := kubeBytes(lim)
		if err != nil {
			t.Errorf("container %s: limits.memory %q: %v", c.name, lim, err)
			continue
		}
		if req != lim {
			t.Errorf("container %s requests memory %q and is limited to %q; request what it may use, so the pod is scheduled where that is free", c.name, req, lim)
		}
		v := env[envGoMemLimit]
		soft, err := goMemLimit(v)
		if err != nil {
			t.Errorf("container %s: %s=%q: %v", c.name, envGoMemLimit, v, err)
			continue
		}
		if soft > limit*3/4 {
			t.Errorf("container %s: %s=%s is more than three quarters of its memory limit %s: too little room for what is not Go heap", c.name, envGoMemLimit, v, lim)
		}
		if min := c.budget + 32<<20; soft < min {
			t.Errorf("container %s: %s=%s is under its budget of %d MiB plus 32 MiB: the GC would run back to back when the budget is used", c.name, envGoMemLimit, v, c.budget>>20)
		}
	}
}

// goMemLimit parses a GOMEMLIMIT value as the Go runtime does: a whole number of bytes with an
// optional unit B, KiB, MiB, GiB or TiB (a binary started with anything else, "192Mi" say,
// dies at once: "fatal error: malformed GOMEMLIMIT"). "off" and an empty value are refused
// here: the manifests must set a limit.
func goMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	n, shift := s, uint(0)
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			n, shift = v, u.shift
			break
		}
	}
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil || v <= 0 {
		return 0, errors.New("want a positive number of bytes with B, KiB, MiB, GiB or TiB")
	}
	return v << shift, nil
}

// kubeBytes parses a Kubernetes memory quantity in the forms the manifests use: a whole number
// with Ki, Mi, Gi (or k, M, G) or none.
func kubeBytes(q string) (int64, error) {
	for _, u := range []struct {
		suffix string
		mul    int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}} {
		if v, ok := strings.CutSuffix(q, u.suffix); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return 0, errors.New("want a positive whole quantity")
			}
			return n * u.mul, nil
		}
	}
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("want a positive whole quantity with Ki, Mi, Gi, k, M or G")
	}
	return n, nil
}

// TestGoMemLimitParse: the forms the runtime takes, and what it refuses.
func TestGoMemLimitParse(t *testing.T) {
	for s, want := range map[string]int64{"192MiB": 192 << 20, "1GiB": 1 << 30, "1048576": 1 << 20, "512KiB": 512 << 10, "100B": 100} {
		if got, err := goMemLimit(s); err != nil || got != want {
			t.Errorf("goMemLimit(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "off", "192Mi", "192MB", "-1MiB", "1.5GiB"} {
		if got, err := goMemLimit(s); err == nil {
			t.Errorf("goMemLimit(%q) = %d; want an error", s, got)
		}
	}
}
