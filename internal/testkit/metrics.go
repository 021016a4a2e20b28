package testkit

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Scrape returns the samples of GET /metrics at addr (host:port), by series
// ("name{labels}" → value as written).
func Scrape(t testing.TB, addr string) map[string]string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading /metrics of %s: %v", addr, err)
	}
	samples := map[string]string{}
	for _, l := range strings.Split(string(body), "\n") {
		if i := strings.LastIndexByte(l, ' '); i > 0 && !strings.HasPrefix(l, "#") {
			samples[l[:i]] = l[i+1:]
		}
	}
	return samples
}
