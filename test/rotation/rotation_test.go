// Package rotation proves that self-managed certificate rotation costs no
// admission: configstamp (two replicas sharing the TLS Secret) runs with
// lifetimes of seconds against a real kube-apiserver while opted-in
// Deployments are created one after another, until the serving certificate has
// been renewed at least twice and the CA rotated at least once (and its
// predecessor dropped from the CA bundle).
//
// The webhook fails open (failurePolicy Ignore), so a TLS failure would not
// fail a create: it would admit the Deployment unstamped. The assertions are
// therefore that every Create response carries the stamp, that no stored
// Deployment lacks it, that kube-apiserver counted no fail-open for
// configstamp's webhooks, and that a TLS client trusting exactly the
// MutatingWebhookConfiguration's CA bundle always accepted both replicas.
package rotation

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

const (
	tlsSecret = "configstamp-webhook-tls" // --tls-secret default
	mwcName   = "configstamp"             // --webhook-config-name default
	// A leaf is renewed 8 s before it expires: every ~7 s. The CA is rotated
	// 8 s before it expires (~32 s after it was made) and its predecessor
	// leaves the bundle when it expires, 8 s later.
	switchWindow = 4 * time.Second // check interval 1 s + propagation delay 2 s + slack
)

var args = []string{
	"--ca-lifetime=40s", "--cert-lifetime=15s", "--renew-before=8s", "--cert-check-interval=1s",
	// No controller-manager runs here: follow no rollouts.
	"--max-concurrent-rollouts=0", "--halt-on-failure=false", "--debounce=0",
}

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{Args: args}))
}

// secretEvent is one observed change of the TLS Secret.
type secretEvent struct {
	at                 time.Time
	leaf, ca, previous bool // tls.crt changed, ca.crt changed, ca-previous.crt dropped
}

type secretWatch struct {
	mu     sync.Mutex
	last   *corev1.Secret
	events []secretEvent
}

func (w *secretWatch) observe(s *corev1.Secret) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last != nil {
		e := secretEvent{at: time.Now(),
			leaf:     !bytes.Equal(w.last.Data[certs.KeyTLSCert], s.Data[certs.KeyTLSCert]),
			ca:       !bytes.Equal(w.last.Data[certs.KeyCACert], s.Data[certs.KeyCACert]),
			previous: len(w.last.Data[certs.KeyPreviousCACert]) > 0 && len(s.Data[certs.KeyPreviousCACert]) == 0,
		}
		if e.leaf || e.ca || e.previous {
			w.events = append(w.events, e)
		}
	}
	w.last = s
}

// counts returns leaf-only renewals, CA rotations, previous-CA drops and the
// time of the last event.
func (w *secretWatch) counts() (leafOnly, ca, dropped int, last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		switch {
		case e.ca:
			ca++
		case e.leaf:
			leafOnly++
		}
		if e.previous {
			dropped++
		}
		last = e.at
	}
	return
}

// watchSecret follows the TLS Secret until ctx ends (re-watching when the
// watch closes).
func watchSecret(ctx context.Context, cs kubernetes.Interface, w *secretWatch) {
	rv := ""
	for ctx.Err() == nil {
		wi, err := cs.CoreV1().Secrets(framework.OwnNamespace).Watch(ctx, metav1.ListOptions{
			FieldSelector: "metadata.name=" + tlsSecret, ResourceVersion: rv})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for ev := range wi.ResultChan() {
			s, ok := ev.Object.(*corev1.Secret)
			if !ok {
				rv = "" // an error (e.g. an expired resourceVersion): list again
				continue
			}
			rv = s.ResourceVersion
			w.observe(s)
		}
	}
}

// tlsProbe dials the replicas' webhook ports and verifies the served leaf
// against the MutatingWebhookConfiguration's current CA bundle, as the API
// server does.
type tlsProbe struct {
	mu       sync.Mutex
	ok       int
	failures []string
}

func (p *tlsProbe) run(ctx context.Context, c client.Client, ports []int) {
	for ctx.Err() == nil {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: mwcName}, mwc); err == nil && len(mwc.Webhooks) > 0 {
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle)
			for _, port := range ports {
				addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
				conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
					&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
				p.mu.Lock()
				if err != nil {
					if ctx.Err() == nil {
						p.failures = append(p.failures, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), addr, err))
					}
				} else {
					p.ok++
					_ = conn.Close()
				}
				p.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type admission struct {
	at      time.Time
	stamped bool
	err     error
}

func TestRotationUnderLoadLosesNoAdmission(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}

	// A second replica sharing the Secret. It registered last, so the API
	// server calls it; the first one keeps rotating and is probed over TLS.
	second, err := env.StartConfigstamp(ctx, env.Configstamp.LogPath+".replica2", args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Stop)
	var tasks sync.WaitGroup
	defer tasks.Wait()
	defer cancel()

	watch := &secretWatch{}
	tasks.Go(func() { watchSecret(ctx, cs, watch) })
	probe := &tlsProbe{}
	tasks.Go(func() { probe.run(ctx, env.Client, []int{env.Configstamp.WebhookPort, second.WebhookPort}) })

	ns := env.Namespace(t, "rotation", nil)
	if err := env.Client.Create(ctx, framework.ConfigMap(ns, "app-config", map[string]string{"a": "1"}, nil)); err != nil {
		t.Fatal(err)
	}
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")

	// Create until the leaf was renewed twice, the CA rotated and its
	// predecessor dropped, and a switch window has passed since the last of it.
	var admissions []admission
	deadline := time.Now().Add(110 * time.Second)
	for i := 0; ; i++ {
		leafOnly, ca, dropped, last := watch.counts()
		if leafOnly >= 2 && ca >= 1 && dropped >= 1 && time.Since(last) > switchWindow {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotations seen after %d creates: %d leaf renewals, %d CA rotations, %d previous-CA drops; want 2, 1, 1",
				i, leafOnly, ca, dropped)
		}
		dep := framework.Deployment(ns, fmt.Sprintf("app-%05d", i), framework.OptIn, spec)
		a := admission{at: time.Now()}
		a.err = env.Client.Create(ctx, dep) // dep is now the API server's response
		a.stamped = a.err == nil && strings.HasPrefix(dep.Spec.Template.Annotations[stamp.AnnotationHash], "v1-")
		admissions = append(admissions, a)
		time.Sleep(20 * time.Millisecond) // pace: ~30 creates a second on a shared 2-core machine
	}
	cancel()
	tasks.Wait()
	loadEnd := time.Now()

	// Report.
	failed := 0
	var failures []string
	for _, a := range admissions {
		if !a.stamped {
			failed++
			if len(failures) < 10 {
				failures = append(failures, fmt.Sprintf("%s err=%v", a.at.Format("15:04:05.000"), a.err))
			}
		}
	}
	leafOnly, caRot, dropped, _ := watch.counts()
	t.Logf("%d creates in %v, %d not stamped at CREATE", len(admissions), loadEnd.Sub(admissions[0].at).Round(time.Millisecond), failed)
	t.Logf("TLS Secret changes seen: %d leaf-only renewals, %d CA rotations (each with a new leaf), %d previous-CA drops", leafOnly, caRot, dropped)
	watch.mu.Lock()
	for _, e := range watch.events {
		var in, bad int
		for _, a := range admissions {
			if !a.at.Before(e.at.Add(-time.Second)) && a.at.Before(e.at.Add(switchWindow)) {
				in++
				if !a.stamped {
					bad++
				}
			}
		}
		kind := "leaf renewal"
		if e.ca {
			kind = "CA rotation"
		} else if !e.leaf {
			kind = "previous CA dropped"
		}
		t.Logf("  +%5.1fs %-20s %3d creates from 1s before to %v after, %d not stamped",
			e.at.Sub(admissions[0].at).Seconds(), kind, in, switchWindow, bad)
	}
	watch.mu.Unlock()
	t.Logf("TLS probe trusting only the MutatingWebhookConfiguration's CA bundle, both replicas: %d handshakes, %d failures", probe.ok, len(probe.failures))

	if failed > 0 {
		t.Errorf("%d of %d creates not stamped at CREATE (first: %v)", failed, len(admissions), failures)
	}
	if len(probe.failures) > 0 {
		t.Errorf("a replica served a certificate the CA bundle does not trust: %v", probe.failures[:min(10, len(probe.failures))])
	}

	// Nothing stored unstamped (a fail-open admission would be).
	list := &appsv1.DeploymentList{}
	if err := env.Client.List(t.Context(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	unstamped := 0
	for _, d := range list.Items {
		if !strings.HasPrefix(d.Spec.Template.Annotations[stamp.AnnotationHash], "v1-") {
			unstamped++
		}
	}
	t.Logf("stored Deployments: %d, unstamped: %d", len(list.Items), unstamped)
	if unstamped > 0 || len(list.Items) != len(admissions) {
		t.Errorf("%d stored Deployments, %d unstamped; want %d, 0", len(list.Items), unstamped, len(admissions))
	}

	// kube-apiserver's own account of the webhook calls.
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("scraping kube-apiserver /metrics: %v", err)
	}
	all := func(string) bool { return true }
	calls := sumOurs(raw, "apiserver_admission_webhook_request_total", all)
	not200 := sumOurs(raw, "apiserver_admission_webhook_request_total", func(l string) bool { return !strings.Contains(l, `code="200"`) })
	rejected := sumOurs(raw, "apiserver_admission_webhook_request_total", func(l string) bool { return strings.Contains(l, `rejected="true"`) })
	failOpen := sumOurs(raw, "apiserver_admission_webhook_fail_open_count", all)
	rejections := sumOurs(raw, "apiserver_admission_webhook_rejection_count", all)
	t.Logf("kube-apiserver: %v calls to configstamp's webhooks (%v not answered 200, %v rejected), fail-open count %v, rejection count %v",
		calls, not200, rejected, failOpen, rejections)
	if calls < float64(len(admissions)) {
		t.Errorf("kube-apiserver counted %v calls to configstamp's webhooks for %d creates: did the metric names change?", calls, len(admissions))
	}
	if failOpen != 0 || rejections != 0 || not200 != 0 || rejected != 0 {
		t.Errorf("kube-apiserver counted failed calls to configstamp's webhooks: %v fail-open, %v rejections, %v not 200, %v rejected",
			failOpen, rejections, not200, rejected)
	}
}

// sumOurs sums the samples of family for configstamp's webhooks
// (name="<id>.configstamp.io") whose line satisfies keep. A counter that was
// never incremented has no samples and sums to 0.
func sumOurs(metrics []byte, family string, keep func(line string) bool) float64 {
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, family+"{")
		if !ok || !strings.Contains(rest, `.configstamp.io"`) || !keep(line) {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
