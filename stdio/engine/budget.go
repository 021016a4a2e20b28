package engine

import "sync"

// Budget bounds the bytes of output staged and not yet let go, across every pool that shares
// it: the emit and metric lines of the attempts in flight, and those of Done results until
// their caller releases them ([Result.Held], [Budget.Release]). While the budget is full, the
// pools write no item to their processes (the answers of those in flight still come in); once
// releases bring it under its limit, writing resumes. While it is full and no delivery is in
// flight in any pool sharing it, one item is written all the same: the limit stops new writes,
// never an answer, so nothing waits on itself (a delivery whose output alone exceeds the
// limit goes through, and so does the record a caller's held results wait on). What is held
// can pass the limit by what the deliveries in flight when it filled still stage.
//
// A nil *Budget is no budget. Its methods are safe for concurrent use.
type Budget struct {
	limit int64

	mu       sync.Mutex
	held     int64
	peak     int64
	inFlight int           // deliveries in flight in the pools sharing the budget
	room     chan struct{} // closed when writing may resume after it had to wait
}

// NewBudget returns a budget of limit bytes (at least 1).
func NewBudget(limit int64) *Budget {
	return &Budget{limit: max(limit, 1), room: make(chan struct{})}
}

// Limit returns the budget's limit in bytes.
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Held returns the bytes held now.
func (b *Budget) Held() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// Peak returns the most bytes held at once since the budget was made.
func (b *Budget) Peak() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// Release returns n bytes of a Done result's Held once its caller let go of its emits.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	waited := b.waitLocked()
	b.held = max(b.held-n, 0) // a release of bytes never held: tolerated, never below empty
	b.wakeLocked(waited)
	b.mu.Unlock()
}

// waitLocked reports whether a write must wait now: the budget is full and a delivery is in
// flight whose answer will come. b.mu is held.
func (b *Budget) waitLocked() bool { return b.held >= b.limit && b.inFlight > 0 }

// wakeLocked wakes the writers waiting when a write had to wait and no longer does.
func (b *Budget) wakeLocked(waited bool) {
	if waited && !b.waitLocked() {
		close(b.room)
		b.room = make(chan struct{})
	}
}

// begin counts a delivery written; end counts its attempt ended.
func (b *Budget) begin() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.inFlight++
	b.mu.Unlock()
}

func (b *Budget) end() {
	if b == nil {
		return
	}
	b.mu.Lock()
	waited := b.waitLocked()
	b.inFlight--
	b.wakeLocked(waited)
	b.mu.Unlock()
}

// add counts n bytes staged.
func (b *Budget) add(n int) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.held += int64(n)
	b.peak = max(b.peak, b.held)
	b.mu.Unlock()
}

// full reports whether a write must wait now and, when it must, a channel closed once it
// may not have to any more.
func (b *Budget) full() (bool, <-chan struct{}) {
	if b == nil {
		return false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.waitLocked() {
		return false, nil
	}
	return true, b.room
}

// isFull reports whether the budget is full.
func (b *Budget) isFull() bool {
	full, _ := b.full()
	return full
}
