// Command running-total-go keeps a running total per key on the Go SDK (stdio/action). The
// key's state is {"total": N}, decoded like the payload with ctx.State and staged with
// ctx.SetState; each amount adds to it, and the new total is written with the item's key. A
// keyless amount has no state: its total is itself.
package main

import (
	"errors"
	"math"

	"github.com/ankka-flow/millrace/stdio/action"
)

// Amount is an input payload: an amount to add, or a reset of the key's total.
type Amount struct {
	Amount *float64 `json:"amount"`
	Reset  bool     `json:"reset"`
}

// Total is an output payload, and the key's state.
type Total struct {
	Total float64 `json:"total"`
}

func main() {
	action.Map(func(ctx action.Context[action.NoConfig], in Amount) ([]Total, error) {
		_, keyed := ctx.Key()
		keyed = keyed || ctx.KeyBase64() != ""
		if in.Reset {
			if keyed {
				ctx.ClearState() // the key's next amount starts from zero
			}
			return []Total{{Total: 0}}, nil
		}
		if in.Amount == nil || math.IsInf(*in.Amount, 0) || math.IsNaN(*in.Amount) {
			return nil, errors.New("payload has no amount (a number)") // fails for good: --dead-letter sends it to invalid
		}
		if !keyed {
			return []Total{{Total: *in.Amount}}, nil // no key, no state
		}
		var t Total // zero when the key has none: a first amount, or after a reset
		if _, err := ctx.State(&t); err != nil {
			return nil, err
		}
		t.Total += *in.Amount
		if err := ctx.SetState(t); err != nil {
			return nil, err
		}
		return []Total{t}, nil
	})
}
