package engine_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/stdio"
)

// childEnv names the behaviour the test binary plays when started as an action.
const childEnv = testkit.EnvRole

func TestMain(m *testing.M) {
	testkit.Main(m, runChild, nil)
}

// child is a tiny action speaking the protocol by hand, misbehaving as its mode says.
type child struct {
	in   *bufio.Reader
	out  *bufio.Writer
	mode string
}

func (c *child) send(m stdio.Message) {
	c.out.Write(stdio.AppendMessage(nil, &m))
	c.out.Flush()
}

func (c *child) raw(s string) {
	c.out.WriteString(s)
	c.out.Flush()
}

func (c *child) next() (stdio.Message, bool) {
	line, err := c.in.ReadBytes('\n')
	if err != nil {
		return stdio.Message{}, false
	}
	var m stdio.Message
	if err := stdio.DecodeMessage(line[:len(line)-1], &m); err != nil {
		fmt.Fprintln(os.Stderr, "child: bad line from engine:", err)
		os.Exit(9)
	}
	if m.Type == stdio.TypeBatch { // only the batch children declare envelopes
		fmt.Fprintln(os.Stderr, "child: a batch envelope, never declared:", string(line))
		os.Exit(9)
	}
	return m, true
}

// engineLine is one line the engine wrote to a child that declared envelopes.
type engineLine struct {
	raw   []byte          // without its newline
	items []stdio.Message // the envelope's messages in order, or the line's own
	batch bool            // the line was an envelope
}

// nextLine reads one line of a child that declared envelopes. It returns false at the end of
// input and exits 9 on a line that does not decode.
func (c *child) nextLine() (engineLine, bool) {
	line, err := c.in.ReadBytes('\n')
	if err != nil {
		return engineLine{}, false
	}
	l := engineLine{raw: line[:len(line)-1]}
	l.batch, err = stdio.SplitBatch(l.raw, func(msg []byte) error {
		var m stdio.Message
		err := stdio.DecodeInBatch(msg, &m)
		l.items = append(l.items, m)
		return err
	})
	if !l.batch {
		var m stdio.Message
		err = stdio.DecodeMessage(l.raw, &m)
		l.items = append(l.items, m)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: bad line from engine:", err)
		os.Exit(9)
	}
	return l, true
}

func (c *child) echo(m stdio.Message) {
	c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Key: m.Key, Payload: m.Payload})
	c.send(stdio.Message{Type: stdio.TypeDone, Delivery: m.Delivery})
}

func runChild(mode string) int {
	c := &child{in: bufio.NewReaderSize(os.Stdin, 1<<20), out: bufio.NewWriterSize(os.Stdout, 1<<20), mode: mode}
	if strings.HasPrefix(mode, "batch") {
		return runBatchChild(c, mode)
	}
	if strings.HasPrefix(mode, "state") {
		return runStateChild(c, mode)
	}
	if strings.HasPrefix(mode, "cancel") {
		return runCancelChild(c, mode)
	}
	if mode == "stderrtags" {
		return runStderrTagsChild(c)
	}
	marker := os.Getenv("STDIO_TEST_MARKER")
	switch mode {
	case "exit1":
		fmt.Fprintln(os.Stderr, "boom: cannot load model weights")
		return 1
	case "crashloop":
		if _, err := os.Stat(marker); err == nil {
			fmt.Fprintln(os.Stderr, "fatal: config file missing")
			return 1
		}
	case "ignoreshutdown":
		signal.Ignore(syscall.SIGTERM)
	}
	hello, ok := c.next()
	if !ok || hello.Type != stdio.TypeHello {
		return 8
	}
	switch mode {
	case "neverready":
		fmt.Fprintln(os.Stderr, "loading a very large model...")
		time.Sleep(time.Hour)
	case "banner":
		c.raw("Welcome to my action v1.0\n")
	case "window", "windowcrash":
		c.send(stdio.Message{Type: stdio.TypeReady, Window: 4})
	case "slowwindow":
		c.send(stdio.Message{Type: stdio.TypeReady, Window: 8})
	case "holdall", "seqstuck": // sequential actions with a window
		c.send(stdio.Message{Type: stdio.TypeReady, Window: 64})
	case "readyconfig":
		c.raw(`{"type":"ready","future":true}` + "\n")
	default:
		c.send(stdio.Message{Type: stdio.TypeReady})
	}
	if mode == "deaf" {
		time.Sleep(time.Hour) // reads nothing more: the engine's writes block
	}
	var held []stdio.Message // window mode: items held to answer out of order
	for {
		m, ok := c.next()
		if !ok {
			return 0
		}
		if m.Type == stdio.TypeShutdown {
			if mode == "ignoreshutdown" {
				time.Sleep(time.Hour)
			}
			return 0
		}
		if m.Type != stdio.TypeItem {
			continue
		}
		payload := string(m.Payload)
		switch mode {
		case "longline":
			c.raw(`{"type":"emit","delivery":"` + m.Delivery + `","payload":"` + strings.Repeat("x", 9<<20) + "\"}\n")
		case "chatty":
			for range 100 {
				c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Payload: []byte(`"` + strings.Repeat("c", 1000) + `"`)})
			}
			c.send(stdio.Message{Type: stdio.TypeDone, Delivery: m.Delivery})
		case "badutf8":
			c.raw("{\"type\":\"done\",\"delivery\":\"\xff\xfe\"}\n")
		case "nonewline": // a done without its newline, then the end of stdout
			c.raw(`{"type":"done","delivery":"` + m.Delivery + `"}`)
			return 0
		case "nonobject":
			c.raw("[1,2,3]\n")
		case "wrongdelivery":
			c.send(stdio.Message{Type: stdio.TypeDone, Delivery: "dl_someone_else"})
		case "emitafterdone":
			c.echo(m)
			c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Payload: []byte(`"late"`)})
		case "twice":
			c.echo(m)
			c.send(stdio.Message{Type: stdio.TypeDone, Delivery: m.Delivery})
		case "noise":
			c.echo(m)
			c.raw("debug: waiting for the next item\n")
		case "flood":
			line := strings.Repeat("e", 99) + "\n"
			w := bufio.NewWriterSize(os.Stderr, 1<<16)
			mb, _ := strconv.Atoi(os.Getenv("STDIO_TEST_FLOOD_MB"))
			for range (max(mb, 20) << 20) / 100 {
				w.WriteString(line)
			}
			w.Flush()
			c.echo(m)
		case "stderrlog":
			fmt.Fprintln(os.Stderr, "plain words")
			fmt.Fprintln(os.Stderr, `{"level":"warn","msg":"low disk","free_mb":12}`)
			c.echo(m)
		case "hang":
			fmt.Fprintln(os.Stderr, "thinking very hard")
			time.Sleep(time.Hour)
		case "hangfirst":
			if m.Attempt == 1 {
				time.Sleep(time.Hour)
			}
			c.echo(m)
		case "closestdout":
			fmt.Fprintln(os.Stderr, "closing stdout")
			os.Stdout.Close()
			time.Sleep(time.Hour)
		case "crash":
			fmt.Fprintln(os.Stderr, "panic: index out of range")
			return 3
		case "grandchild":
			gc := exec.Command(os.Args[0])
			gc.Env = append(os.Environ(), childEnv+"=sleeper")
			gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
			if err := gc.Start(); err != nil {
				return 7
			}
			fmt.Fprintf(os.Stderr, "grandchild %d\n", gc.Process.Pid)
			c.echo(m)
		case "escapee": // a grandchild that leaves the process group, holding stdout and stderr
			gc := exec.Command(os.Args[0])
			gc.Env = append(os.Environ(), childEnv+"=sleeper")
			gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
			gc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := gc.Start(); err != nil {
				return 7
			}
			fmt.Fprintf(os.Stderr, "grandchild %d\n", gc.Process.Pid)
			c.echo(m)
		case "crashonce", "crashloop":
			if m.Attempt == 1 {
				fmt.Fprintln(os.Stderr, "crashing on attempt 1")
				return 2
			}
			payload := fmt.Sprintf(`{"attempt":%d,"idem":%q}`, m.Attempt, m.IdempotencyKey)
			if m.Traceparent != "" {
				payload = fmt.Sprintf(`{"attempt":%d,"traceparent":%q,"tracestate":%q}`, m.Attempt, m.Traceparent, m.Tracestate)
			}
			c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Payload: []byte(payload)})
			c.send(stdio.Message{Type: stdio.TypeDone, Delivery: m.Delivery})
		case "errors":
			switch payload {
			case `"retryable"`:
				c.send(stdio.Message{Type: stdio.TypeMetric, Delivery: m.Delivery, Name: "tries", Value: 1})
				c.send(stdio.Message{Type: stdio.TypeError, Delivery: m.Delivery, Message: "upstream busy", Retryable: true})
			case `"hang"`:
				fmt.Fprintln(os.Stderr, "hanging")
				time.Sleep(time.Hour)
			case `"fatal"`:
				c.send(stdio.Message{Type: stdio.TypeError, Delivery: m.Delivery, Message: "bad listing"})
			case `"abstain"`:
				c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Payload: []byte(`"dropped"`)})
				c.send(stdio.Message{Type: stdio.TypeAbstain, Delivery: m.Delivery, Reason: "no surface area"})
			default:
				c.echo(m)
			}
		case "keys":
			// A lock file per key: two deliveries of one key at once is an error.
			lock := filepath.Join(marker, "key-"+*m.Key)
			f, err := os.OpenFile(lock, os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				c.send(stdio.Message{Type: stdio.TypeError, Delivery: m.Delivery, Message: "key in flight twice: " + *m.Key})
				continue
			}
			f.Close()
			time.Sleep(time.Millisecond)
			os.Remove(lock)
			c.echo(m)
		case "rendezvous":
			// Done only once two deliveries are in flight at once (in two processes).
			os.WriteFile(filepath.Join(marker, strconv.Itoa(os.Getpid())), nil, 0o600)
			deadline := time.Now().Add(20 * time.Second)
			for {
				entries, _ := os.ReadDir(marker)
				if len(entries) >= 2 {
					break
				}
				if time.Now().After(deadline) {
					c.send(stdio.Message{Type: stdio.TypeError, Delivery: m.Delivery, Message: "alone"})
					break
				}
				time.Sleep(time.Millisecond)
			}
			c.echo(m)
		case "chaos":
			// Misbehave on the first attempt of some items (chosen by id), then behave; keyed
			// items take a lock file per key while answering, so two deliveries of one key
			// in flight at once show up as an error.
			if m.Attempt == 1 {
				switch h := fnv32(m.ID) % 16; h {
				case 0:
					fmt.Fprintln(os.Stderr, "chaos: crash")
					return 3
				case 1:
					c.raw("oops, a stray print\n")
				case 2:
					c.send(stdio.Message{Type: stdio.TypeError, Delivery: m.Delivery, Message: "chaos: busy", Retryable: true})
					continue
				case 3:
					time.Sleep(time.Hour)
				case 4:
					c.send(stdio.Message{Type: stdio.TypeDone, Delivery: "dl_not_mine"})
				case 5:
					c.echo(m)
					c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Payload: []byte(`"late"`)})
					continue
				}
			}
			if m.Key != nil {
				lock := filepath.Join(marker, "key-"+*m.Key)
				if !takeLock(lock) {
					c.send(stdio.Message{Type: stdio.TypeError, Delivery: m.Delivery, Message: "key in flight twice: " + *m.Key})
					continue
				}
				os.Remove(lock) // before the answer: once it is read, the key's next item may start
				c.echo(m)
				continue
			}
			c.echo(m)
		case "rich":
			v := "v1"
			k := "out-key"
			c.send(stdio.Message{Type: stdio.TypeMetric, Delivery: m.Delivery, Name: "rooms", Value: 3.5, Labels: map[string]string{"city": "Lyon"}})
			c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Outlet: "scores", Key: &k, Payload: []byte(`{"score": 81}`),
				Headers: []stdio.Header{{Key: "h1", Value: &v}, {Key: "h2", ValueBase64: "AAE="}, {Key: "h3"}}})
			c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Outlet: "rejects", KeyBase64: "/w==", Payload: m.Payload})
			c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Payload: []byte(`null`)})
			c.send(stdio.Message{Type: stdio.TypeDone, Delivery: m.Delivery})
		case "slowwindow":
			time.Sleep(150 * time.Millisecond)
			c.echo(m)
		case "holdall":
			continue
		case "seqstuck": // one item at a time, in order: a stuck one holds every one after it
			if payload == `"stuck"` {
				time.Sleep(time.Hour)
			}
			c.echo(m)
		case "pid":
			c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Payload: []byte(strconv.Itoa(os.Getpid()))})
			c.send(stdio.Message{Type: stdio.TypeDone, Delivery: m.Delivery})
		case "workdir":
			dir := os.Getenv("MILLSTREAM_WORKDIR")
			os.WriteFile(filepath.Join(dir, "scratch"), []byte("x"), 0o600)
			c.send(stdio.Message{Type: stdio.TypeEmit, Delivery: m.Delivery, Payload: []byte(strconv.Quote(dir))})
			c.send(stdio.Message{Type: stdio.TypeDone, Delivery: m.Delivery})
		case "window":
			// Answer in pairs, the second first: answers are matched by delivery.
			held = append(held, m)
			if len(held) == 2 || payload == `"last"` {
				for i := len(held) - 1; i >= 0; i-- {
					c.echo(held[i])
				}
				held = held[:0]
			}
		case "windowcrash":
			held = append(held, m)
			if len(held) == 3 && m.Attempt == 1 {
				fmt.Fprintln(os.Stderr, "crash with 3 in the window")
				return 4
			}
			if len(held) == 3 || payload == `"last"` || m.Attempt > 1 {
				for _, h := range held {
					c.echo(h)
				}
				held = held[:0]
			}
		default:
			c.echo(m)
		}
	}
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// takeLock creates lock holding this pid; a lock left by a dead process is taken over.
func takeLock(lock string) bool {
	for range 2 {
		f, err := os.OpenFile(lock, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			fmt.Fprint(f, os.Getpid())
			f.Close()
			return true
		}
		b, _ := os.ReadFile(lock)
		pid, _ := strconv.Atoi(string(b))
		if pid > 0 && running(pid) {
			return false // held by a live process (a killed one may linger as a zombie)
		}
		os.Remove(lock)
	}
	return false
}

func init() {
	if os.Getenv(childEnv) == "sleeper" {
		time.Sleep(time.Hour)
		os.Exit(0)
	}
}
