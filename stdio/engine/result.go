package engine

import (
	"github.com/ankka-flow/millrace/stdio"

	"fmt"
	"time"
)

// AttemptInfo describes one finished attempt, for Hooks.AttemptFinished.
type AttemptInfo struct {
	Item    *stdio.Item   // the item as delivered (Delivery and Attempt set); read only, valid during the call
	Outcome Outcome       // Done, Failed (this attempt), Abstained or Abandoned
	Written time.Time     // when the attempt was written to the process
	Latency time.Duration // from the item's write to its answer
	Err     error         // why the attempt failed
	Retry   bool          // whether the item will be retried
}

// Outcome is how an item ended.
type Outcome int

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case Failed:
		return "failed"
	case Abstained:
		return "abstained"
	case Abandoned:
		return "abandoned"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is the final answer for one submitted item, after any retries.
type Result struct {
	Outcome  Outcome
	Emits    []stdio.Emit   // Done: the staged emits of the successful attempt, in order
	Metrics  []stdio.Metric // the metrics of every attempt, in order
	Err      error          // Failed/Abandoned: the cause (wraps a sentinel; names exit status and stderr where relevant)
	Reason   string         // Abstained: the action's reason
	Attempts int            // attempts made (0 when abandoned before the first)
	// Trace is the item's trace context with the span of its last attempt (zero when the item
	// carried none): outputs of a Done item are children of that span.
	Trace stdio.TraceContext
	// State is what a Done item staged for its key's state (Value nil: delete it); nil when it
	// staged nothing and the state stays as it was. Other outcomes never carry one.
	State *stdio.StagedState
	// Held is the bytes of Config.Budget this Done result holds (its emit and metric lines):
	// the caller returns them with Budget.Release once it let go of Emits. 0 without a budget.
	Held int64
}
