// Package engine runs a Millstream action: it supervises the action's processes, pools them,
// hands them items over the wire of package stdio, writes deliveries ahead in a window (in
// batch envelopes to an action that declares them), retries
// failed attempts with backoff and reports every item's final Result.
//
// It is the host side of the action protocol, offered as an API: the bridge embeds it, the
// fixture runner of `millrace test action` runs fixtures through it as production does, and a
// Go program may use it to supervise actions of its own, with no Kafka and no gRPC. Its
// exports are that API: the Config with its knobs and their defaults (the bridge sets only
// what an action line can say), the results, stats and hooks a caller reads, the sentinels a
// caller tests with errors.Is, and the [Child] a supervisor of other processes may reuse. An
// action (and its Go SDK, stdio/action) needs the wire alone.
//
// A [Pool] is started from a [Config] whose values the action config has already settled:
// concurrency, the ready and item timeouts, retries and the window are taken as given (an
// ItemTimeout of 0 is no timeout; a ReadyTimeout of 0 is the spec's 10 s). Only the engine's
// own knobs (backoffs, shutdown grace, queue size, staged bytes, the crash-loop threshold)
// have defaults here.
//
// Every child runs under a [Child]: its own process group, its pipes read to their end, and
// no signal to its group once its leader is reaped. The conformance kit uses the same one.
//
// An item that carries a trace context (stdio.Item.Trace) gets a new span for each attempt,
// written on its item line; Result.Trace names the last one. [Pool.Stats] reads the pool's
// load for metrics at no cost per item.
//
// Errors wrap the package's sentinels ([ErrStart], [ErrCrashed], [ErrTimeout] and the others)
// or a *stdio.ProtocolError (matching stdio.ErrProtocol) for a line that breaks the protocol,
// naming its rule and its line, so callers test with errors.Is and errors.As; their text names
// the action, the delivery and the last stderr lines. Hooks tell the caller what happens as it
// happens: processes started, ended, failing to start, breaking the protocol.
package engine
