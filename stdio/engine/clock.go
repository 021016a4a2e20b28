package engine

import "time"

// clock is where the engine reads the time and sets its timers: the item-timeout watchdog,
// the retry and restart backoffs and the abandon grace. It is the real time except in tests,
// which advance a fake one instead of sleeping.
type clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) timer
}

// timer is the part of *time.Timer the engine uses.
type timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }

// sleep waits d on c, or until quit is closed (false). The timer's function has returned
// when sleep returns.
func sleep(c clock, d time.Duration, quit <-chan struct{}) bool {
	fired := make(chan struct{})
	tm := c.AfterFunc(d, func() { close(fired) })
	select {
	case <-fired:
		return true
	case <-quit:
		if !tm.Stop() {
			<-fired
		}
		return false
	}
}
