package ui_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ankka-flow/millrace/cmd/millrace/internal/actiondir"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/local"
	"github.com/ankka-flow/millrace/cmd/millrace/internal/ui"
	"github.com/ankka-flow/millrace/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, nil, nil) }

// The page's tests run the examples with the page as the run's observer and look at the page
// in a real headless Chromium (Debian's chromium package; scripts/setup installs it), driven
// over the DevTools protocol by chromedp. Each test saves a screenshot of every view it looks
// at in its t.ArtifactDir(): run them with -artifacts -outputdir DIR to keep them.

// waitFor bounds every wait for the page: it polls, so the bound is never reached on a
// working page however loaded the machine is.
const waitFor = 90 * time.Second

// run is one local run with its page.
type run struct {
	page   *ui.Server
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// startRun runs p with the page as its observer, input from the file at path ("": none).
func startRun(t *testing.T, p *actiondir.Pipeline, input string, follow bool) *run {
	t.Helper()
	page, err := ui.New(ui.DefaultAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = page.Serve(ctx)
	}()
	opts := local.Options{Observer: page, Follow: follow, Version: "test",
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if input != "" {
		f, err := os.Open(input)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		opts.Input = f
	}
	r := &run{page: page, cancel: cancel, done: make(chan struct{})}
	runCtx, stopRun := context.WithCancel(context.Background())
	go func() {
		defer close(r.done)
		_, r.err = local.Run(runCtx, p, opts)
	}()
	r.cancel = func() { stopRun() }
	t.Cleanup(func() {
		stopRun()
		<-r.done
		cancel()
		<-served
	})
	return r
}

// wait waits for the run to end by itself and fails the test on its error.
func (r *run) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(waitFor):
		t.Fatalf("the run did not end within %s", waitFor)
	}
	if r.err != nil {
		t.Fatalf("the run: %v", r.err)
	}
}

// browser starts a headless Chromium for the test; its tabs are closed with it.
func browser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		testkit.Lacks(t, "chromium (not on PATH)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1000),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// do runs browser actions, failing the test with what it was doing.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, waitFor) // a query waits for its element until then
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// until waits for a JavaScript expression to hold on the page.
func until(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, waitFor+10*time.Second) // the frame itself may be gone
	defer cancel()
	if _, err := chromedp.Run(pctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(waitFor), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		text, _ := chromedp.Run(tctx, chromedp.Evaluate[string]("document.querySelector('main').innerText"))
		if len(text) > 3000 {
			text = text[:3000] + "…"
		}
		t.Fatalf("the page never showed %s (%s): %v\nthe page:\n%s", what, expr, err, text)
	}
}

// view shows one view of the page (its #hash).
func view(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	ectx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	if _, err := chromedp.Run(ectx, chromedp.Evaluate[string]("location.hash = '#"+name+"'")); err != nil {
		t.Fatalf("showing the %s view: %v", name, err)
	}
	until(t, ctx, "the "+name+" view", fmt.Sprintf("document.querySelector('#view-%s').classList.contains('active')", name))
}

// click clicks the first element matching a CSS selector once the page has it. It clicks from
// within the page, in one step with finding the element: the views are rendered anew by each
// push, so a node found by one DevTools call may be gone by the next (chromedp.Click's "Could
// not find node with given id").
func click(t *testing.T, ctx context.Context, what, selector string) {
	t.Helper()
	until(t, ctx, what, fmt.Sprintf("(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true; })()", selector))
}

// textOf is an expression: the text of the first element matching a CSS selector ("" if none).
func textOf(selector string) string {
	return fmt.Sprintf("((document.querySelector(%q) || {}).textContent || '')", selector)
}

// textsOf is an expression: the text of every element matching a CSS selector, joined.
func textsOf(selector string) string {
	return fmt.Sprintf("[...document.querySelectorAll(%q)].map(e => e.textContent).join('\\n')", selector)
}

// screenshot saves the page as NAME.png in the test's artifact directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(t.ArtifactDir(), t.Name()+"-"+name+".png") // the directory is named by a hash
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func repo(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func loadAction(t *testing.T, dir string) *actiondir.Pipeline {
	t.Helper()
	a, err := actiondir.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := actiondir.Single(a)
	p.Name = a.Name
	return p
}

// TestPageScoreListing: after a run of the score-listing example the graph shows the streamlet
// between its topics with its counts, the records view an abstained record with its reason and
// its source record one click away, and the logs view the metric the action reported.
func TestPageScoreListing(t *testing.T) {
	testkit.NeedTools(t, "python3", "chromium")
	r := startRun(t, loadAction(t, repo(t, "actions/score-listing")), repo(t, "actions/score-listing/sample.jsonl"), false)
	r.wait(t)
	ctx := browser(t)

	do(t, ctx, "open the page", chromedp.Navigate(r.page.URL()+"#graph"))
	until(t, ctx, "the run ended", textOf("#run-status")+" === 'ended'")
	node := `g[data-streamlet="score-listing"]`
	until(t, ctx, "the streamlet's counts", textOf(node)+".includes('done 4') && "+textOf(node)+".includes('fallback 1') && "+textOf(node)+".includes('committed 5')")
	for _, topic := range []string{"score-listing.listings", "score-listing.scores", "score-listing.rejects", "score-listing.unsure"} {
		until(t, ctx, "topic "+topic+" in the graph", fmt.Sprintf("!!document.querySelector('g[data-topic=%q]')", topic))
	}
	screenshot(t, ctx, "graph")

	view(t, ctx, "records")
	click(t, ctx, "pick the fallback topic", `li[data-topic="score-listing.unsure"]`)
	row := `tr[data-record="score-listing.unsure/0/0"]`
	until(t, ctx, "the abstained record with its reason", textOf(row+" .reason")+" === 'no surface area'")
	click(t, ctx, "follow the source link", row+" a.source")
	until(t, ctx, "the source record, highlighted", textOf(`tr.highlight[data-record="score-listing.listings/0/2"]`)+".includes('l-3')")
	screenshot(t, ctx, "records")

	view(t, ctx, "logs")
	until(t, ctx, "the action's metric", textsOf(`tr.metric[data-metric="price_per_m2"]`)+".includes('Lyon')")
	until(t, ctx, "the abstain reason", textOf("tr.abstain")+".includes('no surface area')")
	screenshot(t, ctx, "logs")
}

// TestPagePipeline: while the two-streamlet pipeline (actions/orders.pipeline) runs with
// --follow, the graph shows both streamlets and the topic between them with their counts, the
// dead letter of route-orders shows the bridge's reason and its source record one click away,
// and a record sent from the form goes through both streamlets to the outlet.
func TestPagePipeline(t *testing.T) {
	testkit.NeedTools(t, "node", "chromium")
	p, err := actiondir.LoadPipeline(repo(t, "actions/orders.pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, p, repo(t, "actions/route-orders/sample.jsonl"), true)
	ctx := browser(t)

	do(t, ctx, "open the page", chromedp.Navigate(r.page.URL()+"#graph"))
	until(t, ctx, "the run running", textOf("#run-status")+" === 'running'")
	route, convert := `g[data-streamlet="route-orders"]`, `g[data-streamlet="convert-currency"]`
	until(t, ctx, "route-orders' counts", textOf(route)+".includes('done 2') && "+textOf(route)+".includes('dead letters 1')")
	until(t, ctx, "convert-currency's counts", textOf(convert)+".includes('done 2') && "+textOf(convert)+".includes('committed 2')")
	until(t, ctx, "the topic between them", "!!document.querySelector('g[data-topic=\"order-totals\"]')")
	screenshot(t, ctx, "graph")

	view(t, ctx, "records")
	click(t, ctx, "pick the dead letters", `li[data-topic="orders-invalid"]`)
	row := `tr[data-record="orders-invalid/0/0"]`
	until(t, ctx, "the dead letter with its reason", textOf(row+" .reason")+".includes('order has no lines')")
	until(t, ctx, "its millrace-error header", textOf(row)+".includes('millrace-attempts')")
	screenshot(t, ctx, "dead-letter")
	click(t, ctx, "follow the source link", row+" a.source")
	until(t, ctx, "the source record, highlighted", textOf(`tr.highlight[data-record="orders/0/2"]`)+".includes('o-3')")
	screenshot(t, ctx, "source-record")

	view(t, ctx, "send")
	until(t, ctx, "the input topic in the form", "[...document.querySelectorAll('#send-topic option')].some(o => o.value === 'orders')")
	order := `{"order_id":"o-ui","customer":"c-ui","lines":[{"sku":"Z9","qty":2,"price":5}]}`
	// Filled and sent from within the page in one step, as click does, so a push that renders
	// the view anew cannot come between finding a field and setting it.
	until(t, ctx, "the form filled and sent", fmt.Sprintf(`(() => {
		const q = s => document.querySelector(s);
		if (!q('#send-topic') || !q('#send-button')) return false;
		q('#send-topic').value = 'orders';
		q('#send-key').value = 'o-ui';
		q('#send-value').value = %q;
		q('#send-headers').value = 'source=ui-test';
		q('#send-button').click();
		return true;
	})()`, order))
	until(t, ctx, "the record sent", textOf("#send-result")+".startsWith('sent to orders')")
	screenshot(t, ctx, "send")

	view(t, ctx, "records")
	click(t, ctx, "pick the outlet", `li[data-topic="order-totals-usd"]`)
	until(t, ctx, "the sent record converted in the outlet", "[...document.querySelectorAll('#records tbody tr')].some(tr => tr.textContent.includes('c-ui') && tr.textContent.includes('USD'))")
	screenshot(t, ctx, "sent-record-out")

	r.cancel()
	select {
	case <-r.done:
	case <-time.After(waitFor):
		t.Fatal("the run did not stop")
	}
	if r.err != nil {
		t.Fatalf("the run: %v", r.err)
	}
	until(t, ctx, "the run ended", textOf("#run-status")+" === 'ended'")
}

// TestPageStateAndStderr: after a run of dedup-python (state per key) feeding a script that
// writes a stderr line per record, the state view shows a key's state and the logs view the
// script's line for its record.
func TestPageStateAndStderr(t *testing.T) {
	testkit.NeedTools(t, "python3", "chromium")
	pipeline := filepath.Join(t.TempDir(), "dedup.pipeline")
	text := strings.Join([]string{
		"input events",
		repo(t, "actions/dedup-python") + " events=events unique=unique invalid=invalid",
		mustAbs(t, "testdata/loud") + " in=unique out=loud-out",
	}, "\n") + "\n"
	if err := os.WriteFile(pipeline, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := actiondir.LoadPipeline(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, p, repo(t, "actions/dedup-python/sample.jsonl"), false)
	r.wait(t)
	ctx := browser(t)

	do(t, ctx, "open the page", chromedp.Navigate(r.page.URL()+"#state"))
	view(t, ctx, "state")
	until(t, ctx, "the keys held", "!!document.querySelector('li[data-key=\"u-7\"]') && !!document.querySelector('li[data-key=\"u-9\"]')")
	do(t, ctx, "search a key", chromedp.SendKeys(chromedp.CSS("#state-search"), "u-7"))
	until(t, ctx, "only the key searched", "!document.querySelector('li[data-key=\"u-9\"]') && !!document.querySelector('li[data-key=\"u-7\"]')")
	click(t, ctx, "pick the key", `li[data-key="u-7"]`)
	state := `pre[data-key-state="u-7"]`
	until(t, ctx, "the key's state", textOf(state)+".includes('e-1') && "+textOf(state)+".includes('e-2')")
	screenshot(t, ctx, "state")

	view(t, ctx, "logs")
	line := `div[data-streamlet="loud"] tr.stderr-line[data-record="unique/0/1"]`
	until(t, ctx, "the script's stderr line for its record", textOf(line)+".includes('loud: passing e-2')")
	do(t, ctx, "filter by the record", chromedp.SendKeys(chromedp.CSS("#logs-filter"), "unique/0/1"))
	until(t, ctx, "only that record's lines", "document.querySelectorAll('div[data-streamlet=\"loud\"] tr.stderr-line').length === 1")
	screenshot(t, ctx, "stderr")
}

func mustAbs(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
