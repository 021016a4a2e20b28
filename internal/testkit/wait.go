package testkit

import "time"

// Eventually polls cond until it holds or limit passes, and reports whether it held. It is for
// state a test can only ask about (a broker, a file or log another process writes, /proc):
// where a channel or an event says it, a test waits on that instead. The polls start 5 ms
// apart and back off to 100 ms, so a quick condition is seen at once and a slow one (a
// broker's answer) is not asked a hundred times a second. cond runs on the caller's
// goroutine, so it may end the test.
func Eventually(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for pause := 5 * time.Millisecond; !cond(); pause = min(2*pause, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}
