package testkit

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"

	flowv1 "github.com/ankka-flow/millrace/protocol/ankka/flow/v1"
	"github.com/ankka-flow/millrace/protocol/ankka/flow/v1/flowv1grpc"
)

// ErrClose, returned by a Streamlet's OnBatch, ends the stream normally without being asked.
var ErrClose = errors.New("testkit: the fake streamlet closes the stream")

// Call is one Batch at a fake Streamlet, with the means to answer it.
type Call struct {
	Ctx   context.Context // the stream's
	Conv  int             // the conversation's number at the Streamlet, 1 for the first
	Start *flowv1.Start
	Batch *flowv1.Batch
	send  func(*flowv1.FromProcess) error
}

// Done is closed when the stream ends.
func (c *Call) Done() <-chan struct{} { return c.Ctx.Done() }

// Send sends m on the stream; it is safe to call from several goroutines.
func (c *Call) Send(m *flowv1.FromProcess) error { return c.send(m) }

// Emit sends an Emit of r to outlet for the batch.
func (c *Call) Emit(outlet string, r *flowv1.Record) error {
	return c.send(&flowv1.FromProcess{Message: &flowv1.FromProcess_Emit{Emit: &flowv1.Emit{BatchId: c.Batch.BatchId, Outlet: outlet, Record: r}}})
}

// Ack acknowledges the batch.
func (c *Call) Ack() error {
	return c.send(&flowv1.FromProcess{Message: &flowv1.FromProcess_Ack{Ack: &flowv1.Ack{BatchId: c.Batch.BatchId}}})
}

// Fail fails the batch with msg.
func (c *Call) Fail(msg string) error {
	return c.send(&flowv1.FromProcess{Message: &flowv1.FromProcess_Fail{Fail: &flowv1.Fail{BatchId: c.Batch.BatchId, Error: &flowv1.Error{Message: msg}}}})
}

// echo answers a batch as a plain streamlet would: each record emitted to "out" with its key
// and value, then the Ack.
func echo(c *Call) error {
	for _, r := range c.Batch.GetRecords() {
		if err := c.Emit("out", &flowv1.Record{Key: r.GetRecord().GetKey(), Value: r.GetRecord().GetValue()}); err != nil {
			return err
		}
	}
	return c.Ack()
}

// Streamlet is a fake streamlet process: the Discovery and Streamlet services of ankka.flow.v1,
// answering Discover with Spec and each Batch with OnBatch (on the stream's goroutine, or one
// goroutine per batch when Async). Set its fields before a sidecar connects. With Record set
// it keeps what it was sent for the test to read (Starts, Batches, Stops, Reports); Started
// and Reported, when not nil, get each conversation's number and each ReportError as they come.
type Streamlet struct {
	flowv1grpc.UnimplementedDiscoveryServer
	flowv1grpc.UnimplementedStreamletServer

	Spec       *flowv1.Spec
	OnBatch    func(*Call) error                         // nil: echo
	OnStart    func(conv int, start *flowv1.Start) error // nil: fine
	OnDiscover func()
	Async      bool
	Record     bool
	Started    chan int
	Reported   chan struct{}
	Addr       string // where Listen serves
	Options    []grpc.ServerOption

	mu      sync.Mutex
	srv     *grpc.Server
	convs   int
	starts  []*flowv1.Start
	stops   int
	reports []*flowv1.Problems
	batches []*flowv1.Batch
}

// Listen serves f on 127.0.0.1 at a free port (its Addr) until the test ends.
func (f *Streamlet) Listen(t testing.TB) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.Addr = lis.Addr().String()
	f.serve(lis)
	t.Cleanup(f.Stop)
}

// Restart serves f again on its Addr after Stop.
func (f *Streamlet) Restart(t testing.TB) {
	lis, err := net.Listen("tcp", f.Addr)
	if err != nil {
		t.Errorf("listen again on %s: %v", f.Addr, err)
		return
	}
	f.serve(lis)
}

// Port is the port of Addr.
func (f *Streamlet) Port() string { _, p, _ := net.SplitHostPort(f.Addr); return p }

func (f *Streamlet) serve(lis net.Listener) {
	srv := f.server()
	go srv.Serve(lis)
}

func (f *Streamlet) server() *grpc.Server {
	srv := grpc.NewServer(f.Options...)
	flowv1grpc.RegisterDiscoveryServer(srv, f)
	flowv1grpc.RegisterStreamletServer(srv, f)
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
	return srv
}

// Serve serves f on lis until ctx ends, then stops gracefully; it returns nil after a stop.
func (f *Streamlet) Serve(ctx context.Context, lis net.Listener) error {
	srv := f.server()
	served, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			srv.GracefulStop()
		case <-served:
		}
	}()
	err := srv.Serve(lis)
	close(served)
	<-stopped
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// Stop ends the server and every stream at once: the process becomes unreachable. It may be
// called twice.
func (f *Streamlet) Stop() {
	f.mu.Lock()
	srv := f.srv
	f.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

func (f *Streamlet) Discover(context.Context, *flowv1.SidecarInfo) (*flowv1.Spec, error) {
	f.mu.Lock()
	hook, spec := f.OnDiscover, f.Spec
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	if spec == nil {
		spec = &flowv1.Spec{}
	}
	return spec, nil
}

func (f *Streamlet) ReportError(_ context.Context, ps *flowv1.Problems) (*flowv1.Empty, error) {
	f.mu.Lock()
	if f.Record {
		f.reports = append(f.reports, ps)
	}
	f.mu.Unlock()
	if f.Reported != nil {
		f.Reported <- struct{}{}
	}
	return &flowv1.Empty{}, nil
}

func (f *Streamlet) Run(stream flowv1grpc.Streamlet_RunServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return errors.New("fake streamlet: the first message is not Start")
	}
	f.mu.Lock()
	f.convs++
	conv := f.convs
	if f.Record {
		f.starts = append(f.starts, start)
	}
	onStart := f.OnStart
	f.mu.Unlock()
	if f.Started != nil {
		f.Started <- conv
	}
	if onStart != nil {
		if err := onStart(conv, start); err != nil {
			return err
		}
	}
	var sendMu sync.Mutex
	send := func(m *flowv1.FromProcess) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 1)
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			wg.Wait()
			select {
			case err := <-errc:
				return err
			default:
				return nil
			}
		}
		if err != nil {
			return err
		}
		switch m := msg.Message.(type) {
		case *flowv1.ToProcess_Batch:
			f.mu.Lock()
			if f.Record {
				f.batches = append(f.batches, m.Batch)
			}
			h := f.OnBatch
			f.mu.Unlock()
			if h == nil {
				h = echo
			}
			c := &Call{Ctx: stream.Context(), Conv: conv, Start: start, Batch: m.Batch, send: send}
			if !f.Async {
				if err := h(c); errors.Is(err, ErrClose) {
					return nil
				} else if err != nil {
					return err
				}
				continue
			}
			wg.Go(func() {
				if err := h(c); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			})
		case *flowv1.ToProcess_Stop:
			f.mu.Lock()
			f.stops++
			f.mu.Unlock()
		}
		select {
		case err := <-errc:
			return err
		default:
		}
	}
}

// Batches returns the batches sent to f so far (with Record).
func (f *Streamlet) Batches() []*flowv1.Batch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*flowv1.Batch(nil), f.batches...)
}

// Starts returns the Starts of the conversations so far (with Record).
func (f *Streamlet) Starts() []*flowv1.Start {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*flowv1.Start(nil), f.starts...)
}

// Reports returns the ReportError calls so far (with Record).
func (f *Streamlet) Reports() []*flowv1.Problems {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*flowv1.Problems(nil), f.reports...)
}

// Conversations is how many streams began with a Start.
func (f *Streamlet) Conversations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.convs
}

// Stops is how many Stop messages f received.
func (f *Streamlet) Stops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stops
}
