package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

const (
	testNS     = "configstamp-system"
	testSecret = "configstamp-webhook-tls"
	testMWC    = "configstamp"
)

// clock is a settable fake time shared by the PublicKeyInfrastructures of a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

func testMWCObject() *admissionregistrationv1.MutatingWebhookConfiguration {
	hook := func(name string) admissionregistrationv1.MutatingWebhook {
		url := "https://127.0.0.1:9443/mutate-workloads"
		none := admissionregistrationv1.SideEffectClassNone
		return admissionregistrationv1.MutatingWebhook{Name: name, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte("placeholder")}}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: testMWC},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook("workloads.configstamp.io"), hook("namespaces.configstamp.io")},
	}
}

// newRotator: CA 10 h, leaf 2 h, renew 30 min before expiry, on a fake clock.
func newRotator(t *testing.T, c client.Client, clk *clock) *Rotator {
	t.Helper()
	return &Rotator{
		PKI: &PublicKeyInfrastructure{Client: c, Namespace: testNS, SecretName: testSecret, Hosts: []string{"127.0.0.1"},
			CALifetime: 10 * time.Hour, CertLifetime: 2 * time.Hour, RenewBefore: 30 * time.Minute, Log: logr.Discard(), Now: clk.now},
		CertDir: t.TempDir(), WebhookConfigName: testMWC, PropagationDelay: time.Millisecond, Log: logr.Discard(),
	}
}

func check(t *testing.T, r *Rotator) {
	t.Helper()
	if err := r.Check(t.Context()); err != nil {
		t.Fatalf("check: %v", err)
	}
}

func readSecret(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: testNS, Name: testSecret}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func readMWC(t *testing.T, c client.Client) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: testMWC}, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// bundleOfMWC returns the one caBundle all webhooks share (failing if they differ).
func bundleOfMWC(t *testing.T, c client.Client) []byte {
	t.Helper()
	m := readMWC(t, c)
	b := m.Webhooks[0].ClientConfig.CABundle
	for _, w := range m.Webhooks[1:] {
		if !bytes.Equal(w.ClientConfig.CABundle, b) {
			t.Fatalf("webhooks disagree on the CA bundle: %s has %d bytes, %s %d", m.Webhooks[0].Name, len(b), w.Name, len(w.ClientConfig.CABundle))
		}
	}
	return b
}

func caSerials(t *testing.T, bundle []byte) []string {
	t.Helper()
	certs, err := pki.DecodeX509CertificateChainBytes(bundle)
	if err != nil {
		t.Fatalf("CA bundle: %v", err)
	}
	var out []string
	for _, c := range certs {
		out = append(out, c.SerialNumber.String())
	}
	return out
}

func serialOf(t *testing.T, certPEM []byte) string {
	t.Helper()
	c, err := pki.DecodeX509CertificateBytes(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// verifyServed checks that the pair in dir is valid at `at` for 127.0.0.1
// under the CA bundle and returns the leaf.
func verifyServed(t *testing.T, dir string, bundle []byte, at time.Time) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, KeyTLSCert), filepath.Join(dir, KeyTLSKey))
	if err != nil {
		t.Fatalf("served pair: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatal("CA bundle does not parse")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", CurrentTime: at}); err != nil {
		t.Fatalf("served leaf not trusted by the webhook's CA bundle at %v: %v", at, err)
	}
	return leaf
}

func TestCARotationKeepsPreviousCAInBundle(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	c := fake.NewClientBuilder().WithObjects(testMWCObject()).Build()
	r := newRotator(t, c, clk)

	check(t, r)
	s1 := readSecret(t, c)
	ca1 := serialOf(t, s1.Data[KeyCACert])
	if got := caSerials(t, bundleOfMWC(t, c)); strings.Join(got, ",") != ca1 {
		t.Fatalf("bundle after the first check = %v, want [%s]", got, ca1)
	}
	verifyServed(t, r.CertDir, bundleOfMWC(t, c), clk.now())

	// Keep the leaf fresh up to the CA's renewal point, as the periodic check would.
	for at := t0; at.Before(t0.Add(9 * time.Hour)); at = at.Add(time.Hour) {
		clk.set(at)
		check(t, r)
	}
	oldLeaf, _ := os.ReadFile(filepath.Join(r.CertDir, KeyTLSCert))
	oldKey, _ := os.ReadFile(filepath.Join(r.CertDir, KeyTLSKey))
	if serialOf(t, readSecret(t, c).Data[KeyCACert]) != ca1 {
		t.Fatal("CA replaced before its renewal point")
	}

	// 20 min left on the CA (< RenewBefore): a new CA, the old one kept as previous.
	rotation := t0.Add(10*time.Hour - 20*time.Minute)
	clk.set(rotation)
	check(t, r)
	s2 := readSecret(t, c)
	ca2 := serialOf(t, s2.Data[KeyCACert])
	if ca2 == ca1 {
		t.Fatal("CA not rotated 20 min before expiry")
	}
	if serialOf(t, s2.Data[KeyPreviousCACert]) != ca1 {
		t.Fatalf("%s holds %s, want the replaced CA %s", KeyPreviousCACert, serialOf(t, s2.Data[KeyPreviousCACert]), ca1)
	}
	bundle := bundleOfMWC(t, c)
	if got := caSerials(t, bundle); strings.Join(got, ",") != ca2+","+ca1 {
		t.Fatalf("bundle during the CA rotation = %v, want [%s %s] (new, previous)", got, ca2, ca1)
	}
	// The new leaf (of the new CA) and a replica's old leaf (of the old CA) are both trusted.
	leaf := verifyServed(t, r.CertDir, bundle, rotation)
	if err := leaf.CheckSignatureFrom(mustCert(t, s2.Data[KeyCACert])); err != nil {
		t.Fatalf("served leaf not signed by the current CA: %v", err)
	}
	oldDir := t.TempDir()
	if err := (&Bundle{TLSCert: oldLeaf, TLSKey: oldKey, CACert: s1.Data[KeyCACert]}).WriteFiles(oldDir); err != nil {
		t.Fatal(err)
	}
	verifyServed(t, oldDir, bundle, rotation)

	// Checks while the previous CA is valid change nothing.
	rv := readMWC(t, c).ResourceVersion
	clk.set(rotation.Add(10 * time.Minute))
	check(t, r)
	if readMWC(t, c).ResourceVersion != rv {
		t.Fatal("the MutatingWebhookConfiguration was written although its bundle was right")
	}

	// Once the previous CA has expired it leaves the Secret and the bundle.
	clk.set(t0.Add(10*time.Hour + time.Second))
	check(t, r)
	if _, ok := readSecret(t, c).Data[KeyPreviousCACert]; ok {
		t.Fatalf("%s kept after it expired", KeyPreviousCACert)
	}
	if got := caSerials(t, bundleOfMWC(t, c)); strings.Join(got, ",") != ca2 {
		t.Fatalf("bundle after the previous CA expired = %v, want [%s]", got, ca2)
	}
	verifyServed(t, r.CertDir, bundleOfMWC(t, c), clk.now())
}

func mustCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	c, err := pki.DecodeX509CertificateBytes(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLeafRotationKeepsCA(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	c := fake.NewClientBuilder().WithObjects(testMWCObject()).Build()
	r := newRotator(t, c, clk)
	check(t, r)
	s1 := readSecret(t, c)
	rv := readMWC(t, c).ResourceVersion
	served1, _ := os.ReadFile(filepath.Join(r.CertDir, KeyTLSCert))

	// 20 min left on the leaf: a new leaf under the same CA.
	clk.set(t0.Add(2*time.Hour - 20*time.Minute))
	check(t, r)
	s2 := readSecret(t, c)
	if !bytes.Equal(s2.Data[KeyCACert], s1.Data[KeyCACert]) || !bytes.Equal(s2.Data[KeyCAKey], s1.Data[KeyCAKey]) {
		t.Fatal("the CA changed on a leaf renewal")
	}
	if bytes.Equal(s2.Data[KeyTLSCert], s1.Data[KeyTLSCert]) {
		t.Fatal("leaf not renewed 20 min before expiry")
	}
	if _, ok := s2.Data[KeyPreviousCACert]; ok {
		t.Fatal("a leaf renewal recorded a previous CA")
	}
	if readMWC(t, c).ResourceVersion != rv {
		t.Fatal("a leaf renewal rewrote the MutatingWebhookConfiguration")
	}
	served2, _ := os.ReadFile(filepath.Join(r.CertDir, KeyTLSCert))
	if bytes.Equal(served1, served2) || !bytes.Equal(served2, s2.Data[KeyTLSCert]) {
		t.Fatal("the served file is not the renewed leaf")
	}
	verifyServed(t, r.CertDir, bundleOfMWC(t, c), clk.now())
}

// barrierClient makes the next `parties` reads of the TLS Secret wait for each
// other once armed, so that every replica reads the same stale Secret before
// any of them writes: the race a rotation provokes between replicas.
type barrierClient struct {
	client.Client
	mu      sync.Mutex
	waiting int
	parties int
	release chan struct{}
	lost    int // Secret writes refused because another replica wrote first
}

func (b *barrierClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	err := b.Client.Create(ctx, obj, opts...)
	if apierrors.IsAlreadyExists(err) {
		b.mu.Lock()
		b.lost++
		b.mu.Unlock()
	}
	return err
}

func (b *barrierClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	err := b.Client.Update(ctx, obj, opts...)
	if apierrors.IsConflict(err) {
		b.mu.Lock()
		b.lost++
		b.mu.Unlock()
	}
	return err
}

func (b *barrierClient) lostWrites() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.lost
	b.lost = 0
	return n
}

func (b *barrierClient) arm(parties int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.parties, b.waiting, b.release = parties, 0, make(chan struct{})
}

func (b *barrierClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := b.Client.Get(ctx, key, obj, opts...)
	if _, ok := obj.(*corev1.Secret); !ok || key.Name != testSecret {
		return err
	}
	// Read first, then wait: every party holds the same version when released.
	b.mu.Lock()
	if b.parties == 0 {
		b.mu.Unlock()
		return err
	}
	b.waiting++
	ch := b.release
	if b.waiting == b.parties {
		b.parties = 0
		close(ch)
	}
	b.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

func TestRotatorsSharingSecretConverge(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{t: t0}
	bc := &barrierClient{Client: fake.NewClientBuilder().WithObjects(testMWCObject()).Build()}
	replicas := []*Rotator{newRotator(t, bc, clk), newRotator(t, bc, clk), newRotator(t, bc, clk)}

	round := func(what string) {
		t.Helper()
		bc.lostWrites()
		bc.arm(len(replicas))
		var wg sync.WaitGroup
		errs := make([]error, len(replicas))
		for i, r := range replicas {
			wg.Go(func() { errs[i] = r.Check(t.Context()) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s: replica %d: %v", what, i, err)
			}
		}
		s := readSecret(t, bc)
		bundle := bundleOfMWC(t, bc)
		for i, r := range replicas {
			served := readFiles(r.CertDir)
			if !bytes.Equal(served.CACert, s.Data[KeyCACert]) || !bytes.Equal(served.TLSCert, s.Data[KeyTLSCert]) {
				t.Fatalf("%s: replica %d serves another pair than the Secret holds (split brain)", what, i)
			}
			verifyServed(t, r.CertDir, bundle, clk.now())
		}
		if want := string(joinPEM(s.Data[KeyCACert], s.Data[KeyPreviousCACert])); string(bundle) != want {
			t.Fatalf("%s: the webhook bundle is not the Secret's CA (+ previous)", what)
		}
		if what != "leaf upkeep" {
			// Every replica read the same stale Secret and wrote: all but one lost.
			if lost := bc.lostWrites(); lost != len(replicas)-1 {
				t.Fatalf("%s: %d replicas lost the race for the Secret, want %d (the race did not happen)", what, lost, len(replicas)-1)
			}
		}
	}

	// All create the Secret at once: one CA wins.
	round("first start")
	ca1 := serialOf(t, readSecret(t, bc).Data[KeyCACert])
	// All find the leaf stale at once.
	clk.set(t0.Add(2*time.Hour - 20*time.Minute))
	round("leaf renewal")
	if serialOf(t, readSecret(t, bc).Data[KeyCACert]) != ca1 {
		t.Fatal("a leaf renewal race replaced the CA")
	}
	// All find the CA stale at once: each makes a CA, one wins, the others re-read.
	for at := t0.Add(3 * time.Hour); at.Before(t0.Add(9 * time.Hour)); at = at.Add(time.Hour) {
		clk.set(at)
		round("leaf upkeep")
	}
	clk.set(t0.Add(10*time.Hour - 20*time.Minute))
	round("CA rotation")
	s := readSecret(t, bc)
	if serialOf(t, s.Data[KeyCACert]) == ca1 || serialOf(t, s.Data[KeyPreviousCACert]) != ca1 {
		t.Fatalf("after the CA rotation race: CA %s previous %s, want a new CA and previous %s",
			serialOf(t, s.Data[KeyCACert]), serialOf(t, s.Data[KeyPreviousCACert]), ca1)
	}
	if n := len(caSerials(t, bundleOfMWC(t, bc))); n != 2 {
		t.Fatalf("bundle during the CA rotation has %d CAs, want 2", n)
	}
}

func TestRegisterResetIsRepaired(t *testing.T) {
	// A replica starting during a CA rotation registers the configuration with
	// only the current CA (webhook.Register); its first check restores the
	// previous one.
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{t: t0.Add(10*time.Hour - 20*time.Minute)}
	c := fake.NewClientBuilder().WithObjects(testMWCObject()).Build()
	r := newRotator(t, c, clk)
	clk.set(t0)
	check(t, r)
	clk.set(t0.Add(10*time.Hour - 20*time.Minute))
	check(t, r)
	m := readMWC(t, c)
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = readSecret(t, c).Data[KeyCACert]
	}
	if err := c.Update(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	check(t, r)
	if n := len(caSerials(t, bundleOfMWC(t, c))); n != 2 {
		t.Fatalf("bundle has %d CAs after the check, want the current and the previous", n)
	}
}

func TestValidate(t *testing.T) {
	base := func() *Rotator {
		return &Rotator{PKI: &PublicKeyInfrastructure{CALifetime: 40 * time.Second, CertLifetime: 15 * time.Second, RenewBefore: 8 * time.Second},
			Interval: time.Second}
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("the rotation suite's lifetimes rejected: %v", err)
	}
	defaults := &Rotator{PKI: &PublicKeyInfrastructure{CALifetime: 5 * 365 * 24 * time.Hour, CertLifetime: 365 * 24 * time.Hour, RenewBefore: 30 * 24 * time.Hour}}
	if err := defaults.Validate(); err != nil {
		t.Fatalf("configstamp's default lifetimes rejected: %v", err)
	}
	if got := DefaultCheckInterval(30 * 24 * time.Hour); got != 10*time.Minute {
		t.Errorf("default interval for 30 days = %v", got)
	}
	for name, mutate := range map[string]func(*Rotator){
		"renew before the leaf lifetime": func(r *Rotator) { r.PKI.RenewBefore = 15 * time.Second },
		"renew before the CA lifetime":   func(r *Rotator) { r.PKI.CALifetime = 8 * time.Second; r.PKI.CertLifetime = 30 * time.Second },
		"interval as long as the margin": func(r *Rotator) { r.Interval = 8 * time.Second },
	} {
		r := base()
		mutate(r)
		if err := r.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestWriteFilesHotReload: the webhook server's certificate watcher picks a
// swap up from the file events, long before its own 10 s poll, and never sees
// a certificate with the other pair's key.
func TestWriteFilesHotReload(t *testing.T) {
	clk := &clock{t: time.Now()}
	c := fake.NewClientBuilder().Build()
	p := &PublicKeyInfrastructure{Client: c, Namespace: testNS, SecretName: testSecret, Hosts: []string{"127.0.0.1"},
		CALifetime: 10 * time.Hour, CertLifetime: 2 * time.Hour, RenewBefore: 30 * time.Minute, Log: logr.Discard(), Now: clk.now}
	b1, err := p.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Plain files left by an older configstamp are replaced too.
	if err := os.WriteFile(filepath.Join(dir, KeyTLSCert), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b1.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	// The watcher says when its file watches are in place.
	watching := make(chan struct{})
	var once sync.Once
	ctrllog.SetLogger(funcr.New(func(_, args string) {
		if strings.Contains(args, "Starting certificate poll+watcher") {
			once.Do(func() { close(watching) })
		}
	}, funcr.Options{}))
	cw, err := certwatcher.New(filepath.Join(dir, KeyTLSCert), filepath.Join(dir, KeyTLSKey))
	if err != nil {
		t.Fatal(err)
	}
	cw = cw.WithWatchInterval(time.Hour) // only file events count here
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = cw.Start(ctx) }()

	served := func() string {
		crt, _ := cw.GetCertificate(nil)
		if crt == nil {
			return ""
		}
		return string(crt.Certificate[0])
	}
	leafDER := func(b *Bundle) string {
		pair, err := tls.X509KeyPair(b.TLSCert, b.TLSKey)
		if err != nil {
			t.Fatal(err)
		}
		return string(pair.Certificate[0])
	}
	if served() != leafDER(b1) {
		t.Fatal("watcher does not serve the first pair")
	}
	select {
	case <-watching:
	case <-time.After(30 * time.Second):
		t.Fatal("the certificate watcher did not start")
	}
	for i := range 3 {
		clk.set(clk.now().Add(2 * time.Hour))
		next, err := p.Ensure(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := next.WriteFiles(dir); err != nil {
			t.Fatal(err)
		}
		want := leafDER(next)
		deadline := time.Now().Add(5 * time.Second)
		for served() != want {
			if time.Now().After(deadline) {
				t.Fatalf("swap %d: the certificate watcher still serves the old pair after 5 s", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	entries, _ := os.ReadDir(dir)
	var versions []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), versionPrefix) {
			versions = append(versions, e.Name())
		}
	}
	if len(versions) != 1 {
		t.Fatalf("version directories left: %v", versions)
	}
}
