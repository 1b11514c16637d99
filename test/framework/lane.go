package framework

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LaneLabel marks the namespaces a Lane acts in: its configstamp's
// --namespace-selector is LaneLabel=<the lane's name>.
const LaneLabel = "test.configstamp.io/lane"

// Lane is one test's own configstamp on a shared control plane: its own
// process and flags, its own namespace (hash key, TLS Secret, leader
// election Lease), its own MutatingWebhookConfiguration, acting only in the
// namespaces Lane.Namespace makes. Its budget, halts and canaries are the
// test's alone, and its restarts disturb no other test, so tests with lanes
// of their own run side by side (t.Parallel) as two installations scoped by
// --namespace-selector would in one cluster. What the test leaves is deleted
// when it ends: the namespaces (and so their pods), the process, the webhook
// configuration.
type Lane struct {
	*Process
	// Name is the value of LaneLabel on its namespaces.
	Name string
	// Own is its configstamp's own namespace (--namespace).
	Own string
	env *Env
}

// LaneOptions are what a lane's configstamp is given besides its flags.
type LaneOptions struct {
	// HashKey, when set, is stored as the lane's HMAC key before its
	// configstamp starts (as Config.HashKey is for the suite's), so a test
	// can compute the stamps it expects.
	HashKey []byte
}

// Lane starts a configstamp of t's own with args (see Lane), stopped and
// cleaned up when t ends.
func (e *Env) Lane(t testing.TB, args ...string) *Lane {
	t.Helper()
	return e.LaneWith(t, LaneOptions{}, args...)
}

// LaneWith is Lane with opts.
func (e *Env) LaneWith(t testing.TB, opts LaneOptions, args ...string) *Lane {
	t.Helper()
	l := &Lane{Name: laneName(t), env: e}
	l.Own = "cs-" + l.Name
	ctx := context.WithoutCancel(t.Context())
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: l.Own}}); err != nil {
		t.Fatalf("creating the lane's namespace %s: %v", l.Own, err)
	}
	if opts.HashKey != nil {
		key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.Own, Name: "configstamp-hash-key"},
			Data: map[string][]byte{"key": opts.HashKey}}
		if err := e.Client.Create(ctx, key); err != nil {
			t.Fatalf("storing the lane's hash key: %v", err)
		}
	}
	scoped := []string{"--namespace=" + l.Own, "--webhook-config-name=" + l.webhookConfig(),
		"--namespace-selector=" + LaneLabel + "=" + l.Name}
	p, err := e.StartConfigstamp(ctx, filepath.Join(e.dir, "configstamp-"+l.Name+".log"), append(scoped, args...)...)
	if err != nil {
		t.Fatalf("starting the lane's configstamp: %v", err)
	}
	l.Process = p
	t.Cleanup(func() { l.stop(t) })
	return l
}

// Namespace creates a namespace with a random suffix in the lane (and
// labels), deleted when the test ends.
func (l *Lane) Namespace(t testing.TB, prefix string, labels map[string]string) string {
	t.Helper()
	return l.NamespaceNamed(t, prefix+"-"+rand.String(5), labels)
}

// NamespaceNamed creates namespace name in the lane (and labels), deleted
// when the test ends: for a test whose stamps, known in advance, depend on
// the namespace's name.
func (l *Lane) NamespaceNamed(t testing.TB, name string, labels map[string]string) string {
	t.Helper()
	all := map[string]string{LaneLabel: l.Name}
	for k, v := range labels {
		all[k] = v
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all}}
	if err := l.env.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := l.env.Client.Delete(context.WithoutCancel(t.Context()), ns); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting namespace %s: %v", name, err)
		}
	})
	return name
}

func (l *Lane) webhookConfig() string { return "configstamp-" + l.Name }

// stop ends the process (quoting its log's end when t failed) and deletes
// its webhook configuration and namespace.
func (l *Lane) stop(t testing.TB) {
	if l.Process == nil {
		return
	}
	l.Stop()
	if t.Failed() {
		t.Logf("last lines of %s:\n%s", l.LogPath, l.logTail(60))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: l.webhookConfig()}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: l.Own}},
	} {
		if err := l.env.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting the lane's %s: %v", obj.GetName(), err)
		}
	}
}

var notName = regexp.MustCompile(`[^a-z0-9]+`)

// laneName is a DNS label from t's name (its last words) and a random
// suffix: short enough for a label value and a namespace with a prefix.
func laneName(t testing.TB) string {
	n := strings.Trim(notName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(n) > 40 {
		n = strings.Trim(n[len(n)-40:], "-")
	}
	return fmt.Sprintf("%s-%s", n, rand.String(4))
}
