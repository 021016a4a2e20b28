package lifetime_test

import (
	"sync"
	"testing"

	"github.com/ankka-flow/millrace/internal/lifetime"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEventFiresOnce(t *testing.T) {
	var e lifetime.Event
	if e.HasFired() {
		t.Fatal("HasFired() = true before Fire; want false")
	}
	done := e.Done()
	select {
	case <-done:
		t.Fatal("Done() is closed before Fire; want open")
	default:
	}
	if !e.Fire() {
		t.Fatal("first Fire() = false; want true")
	}
	if e.Fire() {
		t.Fatal("second Fire() = true; want false")
	}
	if !e.HasFired() {
		t.Fatal("HasFired() = false after Fire; want true")
	}
	select {
	case <-done:
	default:
		t.Fatal("Done() taken before Fire is still open after it; want closed")
	}
	if e.Done() != done {
		t.Fatal("Done() returned a different channel after Fire; want the same one")
	}
}

func TestEventFireBeforeDone(t *testing.T) {
	var e lifetime.Event
	e.Fire()
	select {
	case <-e.Done():
	default:
		t.Fatal("Done() first taken after Fire is open; want closed")
	}
}

func TestEventConcurrentFire(t *testing.T) {
	var e lifetime.Event
	const n = 32
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first int
	)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			_ = e.HasFired()
			if e.Fire() {
				mu.Lock()
				first++
				mu.Unlock()
			}
			<-e.Done()
		})
	}
	for range n {
		wg.Go(func() {
			<-start
			<-e.Done()
			if !e.HasFired() {
				t.Error("HasFired() = false after Done() closed; want true")
			}
		})
	}
	close(start)
	wg.Wait()
	if first != 1 {
		t.Fatalf("Fire() returned true %d times from %d goroutines; want 1", first, n)
	}
}
