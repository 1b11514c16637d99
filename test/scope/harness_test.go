// Package scope runs configstamp installations scoped to namespaces against a
// real local control plane (kube-controller-manager, scheduler and kwok too,
// so Deployments really roll) whose kube-apiserver writes an audit log: what
// configstamp lists and watches is read from it, not assumed.
package scope

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

// TestMain starts a control plane whose kube-apiserver writes an audit log,
// and no configstamp: every test starts the installations it needs
// (startConfigstamp).
func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{Plane: framework.Kwok, AuditLog: true, NoConfigstamp: true}))
}

// startConfigstamp runs one installation with args (plus the suite's: no
// debounce, no budget) and stops it when the test ends. Its log is in the
// suite's directory, named after the test.
func startConfigstamp(t *testing.T, name string, args ...string) *framework.Process {
	t.Helper()
	args = append([]string{"--debounce=0", "--max-concurrent-rollouts=0", "--halt-on-failure=false"}, args...)
	p, err := env.StartConfigstamp(t.Context(), filepath.Join(env.Dir(), strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log"), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// namespace creates a namespace with a fixed name (the flags name it before it exists).
func namespace(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	if err := env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// configstampReads returns configstamp's list and watch requests of resources
// received at or after since, one per request (audit stages deduplicated).
func configstampReads(t *testing.T, since time.Time, resources ...string) []framework.AuditEvent {
	t.Helper()
	seen := map[string]bool{}
	var out []framework.AuditEvent
	for _, ev := range env.AuditEvents(t) {
		if seen[ev.AuditID] {
			continue
		}
		if (ev.Verb != "list" && ev.Verb != "watch") || !strings.HasPrefix(ev.UserAgent, "configstamp") || ev.RequestReceived.Before(since) {
			continue
		}
		for _, r := range resources {
			if ev.ObjectRef.Resource == r {
				seen[ev.AuditID] = true
				out = append(out, ev)
			}
		}
	}
	return out
}

// byNamespace counts requests per "verb resource namespace" ("*" for cluster-wide).
func byNamespace(evs []framework.AuditEvent) map[string]int {
	out := map[string]int{}
	for _, ev := range evs {
		ns := ev.ObjectRef.Namespace
		if ns == "" {
			ns = "*"
		}
		out[ev.Verb+" "+ev.ObjectRef.Resource+" "+ns]++
	}
	return out
}
