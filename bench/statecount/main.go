// Command statecount is the stateful action of BenchmarkState: a running count per key on the
// Go SDK (stdio/action), kept in the key's state as {"n": N}, that emits every item's payload
// unchanged with its key, as go-echo does. Beside go-echo it costs a record exactly its
// state: reading it, counting, staging the new one. Its line must keep state for the inlet
// (--state PORT); a keyless item fails, having no state.
package main

import (
	"encoding/json"

	"github.com/ankka-flow/millrace/stdio/action"
)

// count is a key's state.
type count struct {
	N int `json:"n"`
}

func main() {
	action.Map(func(ctx action.Context[action.NoConfig], in json.RawMessage) ([]json.RawMessage, error) {
		var c count // zero when the key has none yet
		if _, err := ctx.State(&c); err != nil {
			return nil, err
		}
		c.N++
		if err := ctx.SetState(c); err != nil {
			return nil, err
		}
		return []json.RawMessage{in}, nil
	})
}
