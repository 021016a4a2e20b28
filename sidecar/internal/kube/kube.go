// Package kube posts Kubernetes Events about the pod the sidecar runs in, with the pod's
// service account, over plain HTTPS: the one API call the sidecar makes does not warrant
// client-go.
package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// The in-cluster paths of the pod's service account, mounted by Kubernetes.
const (
	defaultTokenFile     = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	defaultCAFile        = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
	defaultNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

// component is the reporting component named in every Event.
const component = "millrace-sidecar"

var (
	// errPost is wrapped by Warn when the API server refuses or cannot be reached.
	errPost = errors.New("kube: posting the event failed")
)

// Pod names the pod an Event is about, from the downward API.
type Pod struct {
	Name      string
	Namespace string
	UID       string
}

// Options configure a Client. URL is the API server's base URL ("https://host:port"); the
// token is read from TokenFile at every post, since projected tokens rotate.
type Options struct {
	URL       string
	TokenFile string
	// CA is the PEM of the certificate authority the API server's certificate is checked
	// against; nil means the system roots.
	CA  []byte
	Pod Pod
	// Timeout bounds one post; zero means 10 s.
	Timeout time.Duration
}

// Client posts Events about one pod. It is safe for concurrent use.
type Client struct {
	opts Options
	http *http.Client
	now  func() time.Time
}

// New returns a Client for opts.
func New(opts Options) (*Client, error) {
	if _, err := url.Parse(opts.URL); err != nil || opts.URL == "" {
		return nil, fmt.Errorf("kube: API server URL %q is not a URL", opts.URL)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if opts.CA != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(opts.CA) {
			return nil, errors.New("kube: the service account's CA holds no PEM certificate")
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return &Client{opts: opts, http: &http.Client{Transport: tr, Timeout: opts.Timeout}, now: time.Now}, nil
}

// InCluster returns a Client for the pod the process runs in, or nil and no error outside a
// cluster (KUBERNETES_SERVICE_HOST unset). The pod comes from FLOW_POD_NAME,
// FLOW_POD_NAMESPACE (else the service account's namespace file) and FLOW_POD_UID; a missing
// one inside a cluster is an error naming it. readFile reads the service account's files.
func InCluster(getenv func(string) string, readFile func(string) ([]byte, error)) (*Client, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" {
		return nil, nil
	}
	if port == "" {
		port = "443"
	}
	pod := Pod{Name: getenv("FLOW_POD_NAME"), Namespace: getenv("FLOW_POD_NAMESPACE"), UID: getenv("FLOW_POD_UID")}
	if pod.Namespace == "" {
		if ns, err := readFile(defaultNamespaceFile); err == nil {
			pod.Namespace = strings.TrimSpace(string(ns))
		}
	}
	var missing []string
	if pod.Name == "" {
		missing = append(missing, "FLOW_POD_NAME (fieldRef metadata.name)")
	}
	if pod.Namespace == "" {
		missing = append(missing, "FLOW_POD_NAMESPACE (fieldRef metadata.namespace)")
	}
	if pod.UID == "" {
		missing = append(missing, "FLOW_POD_UID (fieldRef metadata.uid)")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("running in Kubernetes but %s missing: set them from the downward API so stall warnings can name the pod", strings.Join(missing, ", "))
	}
	ca, err := readFile(defaultCAFile)
	if err != nil {
		return nil, fmt.Errorf("running in Kubernetes but the service account's CA cannot be read (%w): mount the service account token (automountServiceAccountToken)", err)
	}
	return New(Options{URL: "https://" + net.JoinHostPort(host, port), TokenFile: defaultTokenFile, CA: ca, Pod: pod})
}

// Pod returns the pod the Client's Events are about.
func (c *Client) Pod() Pod { return c.opts.Pod }

// event is the part of a core/v1 Event the sidecar fills in.
type event struct {
	APIVersion         string         `json:"apiVersion"`
	Kind               string         `json:"kind"`
	Metadata           eventMeta      `json:"metadata"`
	InvolvedObject     objectRef      `json:"involvedObject"`
	Reason             string         `json:"reason"`
	Message            string         `json:"message"`
	Type               string         `json:"type"`
	Source             map[string]any `json:"source"`
	FirstTimestamp     string         `json:"firstTimestamp"`
	LastTimestamp      string         `json:"lastTimestamp"`
	Count              int            `json:"count"`
	ReportingComponent string         `json:"reportingComponent"`
	ReportingInstance  string         `json:"reportingInstance"`
}

type eventMeta struct {
	GenerateName string `json:"generateName"`
	Namespace    string `json:"namespace"`
}

type objectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace"`
	UID        string `json:"uid"`
}

// Warn records a Warning Event with reason and message on the pod: one POST to
// /api/v1/namespaces/NAMESPACE/events with the service account's bearer token. It returns an
// error wrapping errPost when the API server cannot be reached or answers other than 2xx; the
// cause is in the chain too (the token file's error, or the request's: context.Canceled or
// context.DeadlineExceeded when ctx ended first).
func (c *Client) Warn(ctx context.Context, reason, message string) error {
	token, err := os.ReadFile(c.opts.TokenFile)
	if err != nil {
		return fmt.Errorf("%w: the service account token cannot be read: %w", errPost, err)
	}
	now := c.now().UTC().Format(time.RFC3339)
	p := c.opts.Pod
	body, err := json.Marshal(event{
		APIVersion:         "v1",
		Kind:               "Event",
		Metadata:           eventMeta{GenerateName: p.Name + ".", Namespace: p.Namespace},
		InvolvedObject:     objectRef{APIVersion: "v1", Kind: "Pod", Name: p.Name, Namespace: p.Namespace, UID: p.UID},
		Reason:             reason,
		Message:            message,
		Type:               "Warning",
		Source:             map[string]any{"component": component},
		FirstTimestamp:     now,
		LastTimestamp:      now,
		Count:              1,
		ReportingComponent: component,
		ReportingInstance:  p.Name,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", errPost, err)
	}
	u := strings.TrimSuffix(c.opts.URL, "/") + "/api/v1/namespaces/" + url.PathEscape(p.Namespace) + "/events"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %w", errPost, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", errPost, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%w: %s answered %s: %s (does the pod's service account have RBAC permission to create events in %s?)", errPost, u, resp.Status, strings.TrimSpace(string(msg)), p.Namespace)
	}
	return nil
}

// CloseIdleConnections releases the Client's idle connections. It may be called repeatedly.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }
