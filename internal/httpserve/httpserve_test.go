package httpserve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// client is an HTTP client that keeps no idle connection, so none outlives a test.
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

// TestServeStops: Serve answers until its context ends, then returns nil and the address is
// closed.
func TestServeStops(t *testing.T) {
	lis := listen(t)
	addr := lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, lis, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	}()
	resp, err := client().Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Errorf("GET / = %q; want ok", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after its context ended = %v; want nil", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Serve returned", addr)
	}
}

// TestServeCutsSlowRequests: a request still running when the grace has passed is cut, and
// Serve says so with context.DeadlineExceeded in its chain.
func TestServeCutsSlowRequests(t *testing.T) {
	lis := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, lis, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			close(entered)
			<-release
		}), 10*time.Millisecond)
	}()
	got := make(chan error, 1)
	go func() {
		resp, err := client().Get("http://" + lis.Addr().String() + "/")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	<-entered
	cancel()
	err := <-done
	close(release)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Serve with a request outliving the grace = %v; want an error wrapping context.DeadlineExceeded", err)
	}
	if err := <-got; err == nil {
		t.Errorf("the cut request succeeded; want its connection closed")
	}
}

// TestServeListenerFails: a listener that fails ends Serve at once with its error.
func TestServeListenerFails(t *testing.T) {
	lis := listen(t)
	lis.Close()
	err := Serve(context.Background(), lis, http.NotFoundHandler())
	if err == nil || errors.Is(err, http.ErrServerClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve on a closed listener = %v; want its accept error (net.ErrClosed)", err)
	}
}
