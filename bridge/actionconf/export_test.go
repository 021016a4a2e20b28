package actionconf

// The defaults and names the tests compare with.
var (
	DefaultTimeout      = defaults.Timeout
	DefaultReadyTimeout = defaults.ReadyTimeout
	DefaultRetries      = defaults.Retries
)

type LineError = lineError
