// Command go-echo is the smallest Go action: it emits every item's payload unchanged, with the
// item's key. It is the example of the SDK (stdio/action) and the Go echo action of the
// stdio benchmarks.
package main

import (
	"encoding/json"

	"github.com/ankka-flow/millrace/stdio/action"
)

func main() {
	action.Map(func(_ action.Context[action.NoConfig], in json.RawMessage) ([]json.RawMessage, error) {
		return []json.RawMessage{in}, nil
	})
}
