package kube_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/ankka-flow/millrace/sidecar/internal/kube"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// apiServer is a fake Kubernetes API server that checks what an Event post must carry.
func apiServer(t *testing.T, status int) (*httptest.Server, *[]map[string]any) {
	t.Helper()
	var got []map[string]any
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/namespaces/shop/events" {
			t.Errorf("request %s %s; want POST /api/v1/namespaces/shop/events", r.Method, r.URL.Path)
		}
		if a := r.Header.Get("Authorization"); a != "Bearer secret-token" {
			t.Errorf("Authorization = %q; want the service account token", a)
		}
		body, _ := io.ReadAll(r.Body)
		var ev map[string]any
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("body %s: %v", body, err)
		}
		got = append(got, ev)
		w.WriteHeader(status)
		io.WriteString(w, `{"kind":"Status","message":"nope"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func client(t *testing.T, srv *httptest.Server) *kube.Client {
	t.Helper()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := kube.New(kube.Options{URL: srv.URL, TokenFile: token, CA: ca, Pod: kube.Pod{Name: "upper-0", Namespace: "shop", UID: "uid-1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func TestWarn(t *testing.T) {
	srv, got := apiServer(t, http.StatusCreated)
	c := client(t, srv)
	if err := c.Warn(context.Background(), "PartitionStalled", "topic t partition 0 is stalled"); err != nil {
		t.Fatalf("Warn() = %v; want nil", err)
	}
	if len(*got) != 1 {
		t.Fatalf("posts = %d; want 1", len(*got))
	}
	ev := (*got)[0]
	obj := ev["involvedObject"].(map[string]any)
	for k, want := range map[string]any{"kind": "Event", "type": "Warning", "reason": "PartitionStalled", "message": "topic t partition 0 is stalled"} {
		if ev[k] != want {
			t.Errorf("event %s = %v; want %v", k, ev[k], want)
		}
	}
	for k, want := range map[string]string{"kind": "Pod", "name": "upper-0", "namespace": "shop", "uid": "uid-1"} {
		if obj[k] != want {
			t.Errorf("involvedObject.%s = %v; want %v", k, obj[k], want)
		}
	}
}

func TestWarnRefused(t *testing.T) {
	srv, _ := apiServer(t, http.StatusForbidden)
	err := client(t, srv).Warn(context.Background(), "PartitionStalled", "m")
	if !errors.Is(err, kube.ErrPost) || !strings.Contains(err.Error(), "RBAC") {
		t.Errorf("Warn() = %v; want ErrPost naming RBAC as the way out", err)
	}
}

// TestWarnKeepsTheCause: Warn's error wraps ErrPost and what made the post fail, so a caller
// tells a shutdown (ctx canceled) from an API server that refused.
func TestWarnKeepsTheCause(t *testing.T) {
	srv, got := apiServer(t, http.StatusCreated)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := client(t, srv).Warn(ctx, "PartitionStalled", "m")
	if !errors.Is(err, kube.ErrPost) || !errors.Is(err, context.Canceled) {
		t.Errorf("Warn(canceled ctx) = %v; want an error wrapping ErrPost and context.Canceled", err)
	}
	if len(*got) != 0 {
		t.Errorf("posts with ctx canceled = %d; want 0", len(*got))
	}

	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := kube.New(kube.Options{URL: srv.URL, TokenFile: filepath.Join(t.TempDir(), "missing"), CA: ca, Pod: kube.Pod{Name: "upper-0", Namespace: "shop", UID: "uid-1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	if err := c.Warn(context.Background(), "PartitionStalled", "m"); !errors.Is(err, kube.ErrPost) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Warn() without a token file = %v; want an error wrapping ErrPost and fs.ErrNotExist", err)
	}
}

func TestInCluster(t *testing.T) {
	files := map[string]string{kube.DefaultCAFile: "not pem", kube.DefaultNamespaceFile: "shop\n"}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantNil bool
		wantErr string
	}{
		{name: "outside a cluster", env: map[string]string{}, wantNil: true},
		{name: "pod fields missing", env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, wantErr: "FLOW_POD_NAME (fieldRef metadata.name), FLOW_POD_UID"},
		{name: "bad CA", env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "FLOW_POD_NAME": "p", "FLOW_POD_UID": "u"}, wantErr: "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kube.InCluster(func(k string) string { return tc.env[k] }, read)
			if tc.wantNil && (c != nil || err != nil) {
				t.Errorf("InCluster() = %v, %v; want nil, nil", c, err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("InCluster() error = %v; want one naming %q", err, tc.wantErr)
			}
		})
	}
}
