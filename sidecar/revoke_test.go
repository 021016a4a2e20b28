package sidecar_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ankka-flow/millrace/internal/testkit"
	"github.com/ankka-flow/millrace/sidecar"
)

// TestPermissionRevokedWhileRunning grants README's ACLs, runs the echo over n records, then
// removes one ACL while the sidecar runs and produces n more: the sidecar names the missing
// permission (user, operation, resource) as a *PermissionError in the stream failure or the
// fetch error it logs, and /readyz answers not ready with it, or, for the transactional id,
// in the error it stops with; nothing of the new records is committed meanwhile; once the ACL
// is granted again, every record is delivered (once, in exactly-once mode) and committed, and
// the sidecar is ready again.
func TestPermissionRevokedWhileRunning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		eos    bool
		revoke string // a leastPrivilege grant
		stops  bool   // the sidecar stops instead of retrying
	}{
		{"at-least-once/outlet Write", false, "outlet Write", false},
		{"at-least-once/group Read", false, "group Read", false},
		{"at-least-once/inlet Read", false, "inlet Read", false},
		{"exactly-once/outlet Write", true, "outlet Write", false},
		{"exactly-once/transactional id Write", true, "transactional id Write", true},
	} {
		t.Run(tc.name, func(t *testing.T) { revokeEcho(t, tc.eos, tc.revoke, tc.stops) })
	}
}

func revokeEcho(t *testing.T, eos bool, revoke string, stops bool) {
	const n = 20
	in, out := testkit.TopicName(t, "", "in"), testkit.TopicName(t, "", "out")
	group, pod := "group-"+in, "pod-0"
	var acls []kfake.ACL
	var gone kfake.ACL
	for _, g := range leastPrivilege(group, in, out, group+"."+pod, eos) {
		acls = append(acls, g.acl)
		if g.name == revoke {
			gone = g.acl
		}
	}
	b, vars := securedBroker(t, testkit.Security{Mechanism: "SCRAM-SHA-512", ACLs: acls})
	createTopicNamed(t, b, in, 2)
	createTopicNamed(t, b, out, 2)
	e := baseEnv(t, b, newProcess(t, echo), in, out)
	for k, v := range vars {
		e[k] = v
	}
	if eos {
		e["FLOW_DELIVERY"], e["FLOW_POD_NAME"] = "exactly-once", pod
	}
	e["FLOW_METRICS_ADDR"] = fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + e["FLOW_METRICS_ADDR"] + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	all := records(in, 2, 2*n)
	b.Produce(t, all[:n]...)
	r := start(t, e.config(t))
	waitFor(t, "the first records committed", func() bool { return allCommitted(t, b, group, in, ends(2, n)) })

	b.RevokeACL(t, gone)
	b.Produce(t, all[n:]...)
	var perm *sidecar.PermissionError
	if stops {
		select {
		case err := <-r.done:
			close(r.done)
			if !errors.As(err, &perm) {
				t.Fatalf("Run() without %s = %v; want a *PermissionError", revoke, err)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("the sidecar still runs without %s; want it stopped naming it", revoke)
		}
	} else {
		waitFor(t, "the missing "+revoke+" named", func() bool {
			perm = loggedPermission(r.records, gone)
			return perm != nil
		})
	}
	t.Logf("without %s: %v", revoke, perm)
	if perm.Principal != b.Principal || perm.Resource != gone.Name || opName(perm.Operation) != gone.Operation {
		t.Errorf("the error names %s %s on %s; want %s %v on %s", perm.Principal, perm.Operation, perm.Resource, b.Principal, gone.Operation, gone.Name)
	}
	if got := committed(t, b, group, in); !sameOffsets(got, ends(2, n)) {
		t.Errorf("committed %v without %s; want the first records' %v, nothing more", got, revoke, ends(2, n))
	}
	if !stops {
		if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, gone.Name) {
			t.Errorf("/readyz without %s = %d %q; want 503 naming %s", revoke, code, body, gone.Name)
		}
	}

	b.GrantACL(t, gone)
	if stops {
		r = start(t, e.config(t))
	}
	waitFor(t, "every record committed once granted", func() bool { return allCommitted(t, b, group, in, ends(2, 2*n)) })
	waitFor(t, "ready again", func() bool { code, _ := readyz(); return code == http.StatusOK })
	seen := map[string]int{}
	for _, rec := range b.ReadAll(t, out) {
		seen[string(rec.Value)]++
	}
	for _, want := range all {
		if c := seen[string(want.Value)+"!"]; c == 0 || (eos && c != 1) {
			t.Errorf("output of %q seen %d times; want %s", want.Value, c, map[bool]string{false: "at least once", true: "once"}[eos])
		}
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run() = %v; want nil", err)
	}
}

// loggedPermission is the first *PermissionError naming acl's resource among the logged
// stream failures and fetch errors.
func loggedPermission(logs *testkit.Logs, acl kfake.ACL) *sidecar.PermissionError {
	for _, msg := range []string{"stream failed; redelivering from the last commit after a backoff", "Kafka refused a fetch: grant the permission it names"} {
		for _, err := range logs.Errors(msg) {
			var perm *sidecar.PermissionError
			if errors.As(err, &perm) && perm.Resource == acl.Name && resourceType(perm.ResourceType) == acl.Resource {
				return perm
			}
		}
	}
	return nil
}

func resourceType(s string) kmsg.ACLResourceType {
	t, _ := kmsg.ParseACLResourceType(s)
	return t
}

func sameOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, o := range a {
		if b[p] != o {
			return false
		}
	}
	return true
}
