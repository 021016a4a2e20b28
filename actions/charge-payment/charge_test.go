// Package chargepayment_test shows that charge-payment, an action with external effects,
// charges a retried order once: it drives the real Python program through the stdio pool
// against a payment service that loses the answer to the first request.
package chargepayment_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/stdio"
	"github.com/ankka-flow/millrace/stdio/engine"
)

// paymentService applies each Idempotency-Key once and answers a repeat with the first
// receipt. failFirst makes it apply the first charge and then answer 503, as if the answer
// had been lost on the way back.
type paymentService struct {
	mu        sync.Mutex
	failFirst bool
	requests  int
	charges   map[string][]byte // idempotency key → receipt
	keys      []string          // the key of every request, in order
}

func (s *paymentService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	s.requests++
	s.keys = append(s.keys, key)
	receipt, seen := s.charges[key]
	if !seen {
		var body struct {
			Order struct {
				OrderID string  `json:"order_id"`
				Gross   float64 `json:"gross"`
			} `json:"order"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		receipt = fmt.Appendf(nil, `{"order_id":%q,"charged":%v,"charge":"ch-%d"}`, body.Order.OrderID, body.Order.Gross, len(s.charges)+1)
		s.charges[key] = receipt
	}
	if s.failFirst && s.requests == 1 {
		http.Error(w, "lost answer", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(receipt)
}

func TestRetriedChargeIsAppliedOnce(t *testing.T) {
	testkit.NeedTools(t, "python3")
	svc := &paymentService{failFirst: true, charges: map[string][]byte{}}
	srv := httptest.NewServer(svc)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := engine.Start(ctx, engine.Config{
		Name:         "charge-payment",
		Command:      []string{"python3", "main.py"},
		Concurrency:  1,
		Retries:      3,
		RetryBackoff: 10 * time.Millisecond,
		Hello: stdio.Hello{Config: json.RawMessage(fmt.Sprintf(
			`{"endpoint":%q,"request-timeout":"5s"}`, srv.URL+"/charges"))},
	})
	if err != nil {
		t.Fatalf("engine.Start: %v", err)
	}
	defer pool.Close(context.Background(), false)

	key := "o-1"
	results := make(chan engine.Result, 1)
	err = pool.Submit(ctx, stdio.Item{
		ID:             "orders/0/7",
		Key:            &key,
		Payload:        json.RawMessage(`{"order_id":"o-1","customer":"c-9","gross":28.8}`),
		IdempotencyKey: "idem-orders-0-7",
	}, func(r engine.Result) { results <- r })
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	var res engine.Result
	select {
	case res = <-results:
	case <-ctx.Done():
		t.Fatal("no result within 30 s")
	}

	if res.Outcome != engine.Done || res.Attempts != 2 {
		t.Fatalf("result = %v after %d attempts (err %v); want done after 2", res.Outcome, res.Attempts, res.Err)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.charges) != 1 || svc.requests != 2 {
		t.Errorf("service saw %d requests and applied %d charges; want 2 requests, 1 charge", svc.requests, len(svc.charges))
	}
	for i, k := range svc.keys {
		if k != "idem-orders-0-7" {
			t.Errorf("request %d carried Idempotency-Key %q; want the item's idempotencyKey on every attempt", i+1, k)
		}
	}
	if len(res.Emits) != 1 || res.Emits[0].Outlet != "receipts" || res.Emits[0].Key == nil || *res.Emits[0].Key != key {
		t.Fatalf("emits = %+v; want one receipt keyed %q", res.Emits, key)
	}
	var receipt struct{ Charge string }
	if err := json.Unmarshal(res.Emits[0].Payload, &receipt); err != nil || receipt.Charge != "ch-1" {
		t.Errorf("receipt = %s (%v); want the first and only charge ch-1", res.Emits[0].Payload, err)
	}
}
