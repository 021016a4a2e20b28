package local_test

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/conformance"
)

// TestSDKActions runs the conformance kit on each SDK's echo example and on its test action
// (sdk/LANG/testdata) in map and batch mode, as TestExampleActions does for actions/: every SDK
// keeps the protocol at its defaults (a window, chunked reads and writes). Its count example
// runs on a line whose inlet keeps state (--state in), so the state check runs in full. Its
// wait example (an async handler awaiting a 20 ms timer, where the SDK has one) runs
// deliveries at once and declares "concurrent" and "cancel" in ready. A missing runtime fails
// its test.
func TestSDKActions(t *testing.T) {
	root, err := filepath.Abs("../../../../sdk")
	if err != nil {
		t.Fatal(err)
	}
	const params = ` --param min-rooms:integer=2 --param greeting:string=hi --param ratio:double=0.5`
	sdks := []struct{ lang, runtime, echo, action, count, wait string }{
		{"python", "python3", "examples/echo.py", "testdata/action.py", "examples/count.py", "examples/wait.py"},
		{"node", "node", "examples/echo.js", "testdata/action.js", "examples/count.js", "examples/wait.js"},
		{"ruby", "ruby", "examples/echo.rb", "testdata/action.rb", "examples/count.rb", ""},
	}
	for _, s := range sdks {
		dir := filepath.Join(root, s.lang)
		cases := []struct{ name, line string }{
			{"echo", "-- " + s.runtime + " " + filepath.Join(dir, s.echo)},
			{"map", params + " -- " + s.runtime + " " + filepath.Join(dir, s.action) + " map"},
			{"batch", " -- " + s.runtime + " " + filepath.Join(dir, s.action) + " batch 8 0.005"},
			{"count", "--state in -- " + s.runtime + " " + filepath.Join(dir, s.count)},
		}
		if s.wait != "" {
			cases = append(cases, struct{ name, line string }{"wait", "-- " + s.runtime + " " + filepath.Join(dir, s.wait)})
		}
		for _, c := range cases {
			t.Run(s.lang+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				needRuntimes(t, s.lang)
				a, err := actiondir.Load("sdk-" + s.lang + "-" + c.name + " --in in=sdk-in.v1 --out out=sdk-out.v1 " + c.line)
				if err != nil {
					t.Fatalf("Load = %v", err)
				}
				rep, err := conformance.Run(context.Background(), a.Conformance("test"), conformance.Options{})
				if err != nil {
					t.Fatalf("conformance.Run = %v", err)
				}
				var out bytes.Buffer
				_ = rep.WriteText(&out)
				if !rep.Conformant {
					t.Errorf("the %s SDK's %s is not conformant:\n%s", s.lang, c.name, out.String())
				}
				if c.name == "count" && !slices.ContainsFunc(rep.Checks, func(k conformance.Check) bool {
					return k.Name == "state" && strings.Contains(k.Detail, "answered: states of every JSON type")
				}) {
					t.Errorf("the %s SDK's count: the state check did not run in full:\n%s", s.lang, out.String())
				}
			})
		}
	}
}
