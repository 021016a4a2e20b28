// Package httpserve runs the HTTP servers of the sidecar, the bridge and millrace run (their
// metrics and health endpoints) in one way: serve until a context ends, then stop in net/http's
// Shutdown idiom, bounded, and report only what was not asked for.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// shutdownTimeout bounds a server's graceful stop: requests still running after it are cut by
// closing their connections.
const shutdownTimeout = 5 * time.Second

// readHeaderTimeout bounds how long a client may take to send a request's headers, so a
// connection that sends nothing cannot hold a server's goroutine.
const readHeaderTimeout = 10 * time.Second

// Serve serves h on lis until ctx is done, then shuts the server down: it stops accepting,
// waits up to shutdownTimeout for the requests in progress, and closes every connection still
// open after that. It closes lis, and returns once the server has ended: nil after a stop ctx
// asked for and every request finished, otherwise the error that ended the server or cut its
// requests (wrapping context.DeadlineExceeded when the timeout passed).
func Serve(ctx context.Context, lis net.Listener, h http.Handler) error {
	return serve(ctx, lis, h, shutdownTimeout)
}

func serve(ctx context.Context, lis net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served: // Serve ends only on an error of lis, and has closed it
		srv.Close()
		return fmt.Errorf("httpserve: serving on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
		err = fmt.Errorf("httpserve: requests on %s still running after %v were cut: %w", lis.Addr(), grace, err)
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("httpserve: serving on %s: %w", lis.Addr(), serr))
	}
	return err
}
