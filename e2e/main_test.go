package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"go.uber.org/goleak"
)

// Environment of the suite.
const (
	// envRun must be 1 for the suite to run: it builds the binary and starts processes, so a
	// plain `go test ./...` leaves it out and scripts/e2e (and scripts/test) ask for it.
	envRun = "MILLRACE_E2E"
	// envReport, when set, names a file every case appends its result row to (markdown).
	envReport = "MILLRACE_E2E_REPORT"
	// envLoad sets how many records BenchmarkLoad pushes through the pipeline.
	envLoad = "MILLRACE_E2E_LOAD"
	// envRace=1 builds millrace with -race, so the processes under test check themselves.
	envRace = "MILLRACE_E2E_RACE"
	// envGate names the file the childGate action waits for before answering an item.
	envGate = "MILLRACE_E2E_GATE"
)

// bin holds the binaries built once by TestMain.
var bin struct {
	millrace string // the millrace binary under test
	goEcho   string // actions/go-echo, built
	self     string // this test binary, which plays the actions of runChild
	root     string // the module root
}

func TestMain(m *testing.M) {
	testkit.Play(runChild) // the test binary plays a misbehaving action (testkit.RoleEnv(mode))
	if os.Getenv(envRun) != "1" {
		fmt.Printf("e2e: not run; set %s=1 (or use scripts/e2e) to build millrace and run the end-to-end suite\n", envRun)
		os.Exit(0)
	}
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: leaked goroutines:", err)
			code = 1
		}
	}
	os.RemoveAll(filepath.Dir(bin.millrace))
	os.Exit(code)
}

// setup builds millrace and the Go echo action into a temporary directory.
func setup() error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	bin.root = filepath.Dir(wd)
	if bin.self, err = os.Executable(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "millrace-e2e-bin-")
	if err != nil {
		return err
	}
	bin.millrace = filepath.Join(dir, "millrace")
	bin.goEcho = filepath.Join(dir, "go-echo")
	args := []string{"build"}
	if os.Getenv(envRace) == "1" {
		args = append(args, "-race")
	}
	for out, pkg := range map[string]string{bin.millrace: "./cmd/millrace", bin.goEcho: "./actions/go-echo"} {
		cmd := exec.Command("go", append(args, "-o", out, pkg)...)
		cmd.Dir = bin.root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	return nil
}

// Child actions, played by this test binary when testkit.EnvRole names a mode. Every mode echoes
// each item (payload, key or keyBase64, headers) to the single outlet, except that an item
// whose payload contains "poison":true gets the mode's misbehaviour.
const (
	childEcho         = "echo"          // well behaved
	childNeverReady   = "never-ready"   // reads hello, never answers ready
	childExitAtStart  = "exit-at-start" // writes a reason on stderr and exits 3 before hello
	childFloodStderr  = "flood-stderr"  // 2,000 lines of stderr per item, then echoes
	childGarbage      = "garbage"       // poison: a line that is not JSON on stdout
	childHugeLine     = "huge-line"     // poison: a 9 MiB line on stdout
	childUndeclared   = "undeclared"    // poison: emits to the outlet "nowhere"
	childOverMax      = "over-max"      // poison: emits a 5 MiB payload (over 4 MiB max_message_bytes)
	childOverLimit    = "over-limit"    // poison: emits a 2 MiB payload (over a default outlet topic's limit)
	childGrow         = "grow"          // every item: one emit of 12 KB, the payload and a pad
	childFanOut       = "fan-out"       // every item: fanOutEmits emits of fanOutBytes each (fanout_test.go)
	childGate         = "gate"          // answers no item until the file named by envGate exists
	childCount        = "count"         // a running count per key, kept in the key's state (state_test.go)
	childSlow         = "slow"          // echoes, spending half a millisecond on every item (pause_test.go)
	childExitMessage  = "e2e-action: cannot start: the credentials file /run/secrets/e2e is missing"
	childFloodLine    = "e2e-action: a noisy log line"
	childPoisonMarker = `"poison":true`
)

// childItem is the part of an item the child actions read.
type childItem struct {
	Type      string          `json:"type"`
	Delivery  string          `json:"delivery"`
	Key       *string         `json:"key,omitempty"`
	KeyBase64 string          `json:"keyBase64,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Headers   json.RawMessage `json:"headers,omitempty"`
}

// childEmit is an emit line.
type childEmit struct {
	Type      string          `json:"type"`
	Delivery  string          `json:"delivery"`
	Outlet    string          `json:"outlet,omitempty"`
	Key       *string         `json:"key,omitempty"`
	KeyBase64 string          `json:"keyBase64,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Headers   json.RawMessage `json:"headers,omitempty"`
}

// runChild is the action the test binary plays; it returns the exit status.
func runChild(mode string) int {
	if mode == childCount {
		return runCount()
	}
	if mode == childExitAtStart {
		fmt.Fprintln(os.Stderr, childExitMessage)
		return 3
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	send := func(v any) {
		b, _ := json.Marshal(v)
		out.Write(b)
		out.WriteByte('\n')
		out.Flush()
	}
	for {
		line, err := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var it childItem
			if json.Unmarshal(line, &it) != nil {
				fmt.Fprintln(os.Stderr, "e2e-action: input line is not JSON")
				continue
			}
			switch it.Type {
			case "hello":
				if mode != childNeverReady {
					send(map[string]string{"type": "ready"})
				}
			case "shutdown":
				return 0
			case "item":
				childAnswer(mode, it, out, send)
			}
		}
		if err != nil {
			return 0
		}
	}
}

func childAnswer(mode string, it childItem, out *bufio.Writer, send func(any)) {
	em := childEmit{Type: "emit", Delivery: it.Delivery, Outlet: "out", Key: it.Key, KeyBase64: it.KeyBase64, Payload: it.Payload, Headers: it.Headers}
	poison := bytes.Contains(it.Payload, []byte(childPoisonMarker))
	switch {
	case mode == childFanOut:
		fanOut(it, out)
		send(map[string]string{"type": "done", "delivery": it.Delivery})
		return
	case mode == childGrow:
		em.Payload = json.RawMessage(`{"in":` + string(it.Payload) + `,"pad":"` + strings.Repeat("g", 12000) + `"}`)
	case mode == childSlow:
		time.Sleep(500 * time.Microsecond) // the action's work, as issue 34's raw Python echo
	case mode == childGate:
		for {
			if _, err := os.Stat(os.Getenv(envGate)); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	case mode == childFloodStderr:
		w := bufio.NewWriter(os.Stderr)
		for i := range 2000 {
			fmt.Fprintf(w, "%s %d %s\n", childFloodLine, i, strings.Repeat("x", 200))
		}
		w.Flush()
	case !poison:
	case mode == childGarbage:
		out.WriteString("this is not JSON: the action printed a debug line on stdout\n")
		out.Flush()
	case mode == childHugeLine:
		big := strings.Repeat("y", 9<<20)
		em.Payload = json.RawMessage(`"` + big + `"`)
	case mode == childUndeclared:
		em.Outlet = "nowhere"
	case mode == childOverMax:
		em.Payload = json.RawMessage(`"` + strings.Repeat("z", 5<<20) + `"`)
	case mode == childOverLimit:
		em.Payload = json.RawMessage(`"` + strings.Repeat("z", 2<<20) + `"`)
	}
	send(em)
	send(map[string]string{"type": "done", "delivery": it.Delivery})
}
