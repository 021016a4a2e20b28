package actiondir

// ErrNoAction is Load's sentinel, for the tests.
var ErrNoAction = errNoAction
