package certs

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// recordingManager records what a Provider adds; every other Manager method
// is nil (calling one panics).
type recordingManager struct {
	manager.Manager
	runnables []manager.Runnable
	ready     map[string]healthz.Checker
}

func (m *recordingManager) Add(r manager.Runnable) error {
	m.runnables = append(m.runnables, r)
	return nil
}

func (m *recordingManager) AddReadyzCheck(name string, check healthz.Checker) error {
	if m.ready == nil {
		m.ready = map[string]healthz.Checker{}
	}
	m.ready[name] = check
	return nil
}

func testSelfManaged(c client.Client, register func(context.Context, []byte) error) *SelfManaged {
	return &SelfManaged{
		PKI: &PublicKeyInfrastructure{Client: c, Namespace: "ns", SecretName: "tls", Hosts: []string{"127.0.0.1"},
			CALifetime: 24 * time.Hour, CertLifetime: time.Hour, RenewBefore: 10 * time.Minute, Log: logr.Discard()},
		WebhookConfigName: testMWC, Register: register, Log: logr.Discard(),
	}
}

func TestSelfManagedPrepareStartClose(t *testing.T) {
	c := fake.NewClientBuilder().WithObjects(testMWCObject()).Build()
	var registered []byte
	s := testSelfManaged(c, func(_ context.Context, caBundle []byte) error {
		registered = caBundle
		return nil
	})
	dir, err := s.Prepare(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The pair of the Secret is served from a temporary directory.
	if err := FilesValid(dir)(&http.Request{}); err != nil {
		t.Fatalf("files in %s after Prepare: %v", dir, err)
	}
	secret := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "tls"}, secret); err != nil {
		t.Fatalf("the Secret after Prepare: %v", err)
	}
	if served := readFiles(dir); !bytes.Equal(served.TLSCert, secret.Data[KeyTLSCert]) {
		t.Error("the served certificate is not the Secret's")
	}

	mgr := &recordingManager{}
	if err := s.Start(t.Context(), mgr); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(registered, (&Bundle{CACert: secret.Data[KeyCACert]}).CABundle()) {
		t.Errorf("registered CA bundle %q, want the Secret's CA", registered)
	}
	if len(mgr.runnables) != 1 {
		t.Fatalf("%d runnables added, want the Rotator", len(mgr.runnables))
	}
	if r, ok := mgr.runnables[0].(*Rotator); !ok || r.CertDir != dir || r.WebhookConfigName != testMWC {
		t.Errorf("runnable %#v, want a Rotator of %s keeping %s", mgr.runnables[0], dir, testMWC)
	}
	check, ok := mgr.ready[ReadyCheckName]
	if !ok || len(mgr.ready) != 1 {
		t.Fatalf("ready checks %v, want only %q", mgr.ready, ReadyCheckName)
	}
	if err := check(&http.Request{}); err != nil {
		t.Errorf("ready check: %v", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory %s after Close: %v, want it removed", dir, err)
	}
}

func TestSelfManagedKeepsAGivenDir(t *testing.T) {
	c := fake.NewClientBuilder().WithObjects(testMWCObject()).Build()
	s := testSelfManaged(c, func(context.Context, []byte) error { return nil })
	s.CertDir = filepath.Join(t.TempDir(), "certs")
	dir, err := s.Prepare(t.Context())
	if err != nil || dir != s.CertDir {
		t.Fatalf("Prepare = %q, %v; want %q", dir, err, s.CertDir)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := FilesValid(dir)(&http.Request{}); err != nil {
		t.Errorf("Close removed or broke a directory it did not make: %v", err)
	}
}

func TestSelfManagedRejectsBadLifetimesBeforeWriting(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	s := testSelfManaged(c, func(context.Context, []byte) error { return nil })
	s.PKI.RenewBefore = 2 * time.Hour // longer than CertLifetime
	if _, err := s.Prepare(t.Context()); err == nil {
		t.Fatal("Prepare accepted --renew-before longer than --cert-lifetime")
	}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "tls"}, &corev1.Secret{}); err == nil {
		t.Error("Prepare wrote the Secret although the lifetimes are invalid")
	}
	if err := s.Start(t.Context(), &recordingManager{}); err == nil {
		t.Error("Start after a failed Prepare succeeded")
	}
}

func TestCertManagerFiles(t *testing.T) {
	p := &CertManagerFiles{}
	dir, err := p.Prepare(t.Context())
	if err != nil || dir != DefaultCertManagerDir() {
		t.Fatalf("Prepare = %q, %v; want %q", dir, err, DefaultCertManagerDir())
	}
	mounted := t.TempDir()
	p = &CertManagerFiles{CertDir: mounted}
	if dir, _ := p.Prepare(t.Context()); dir != mounted {
		t.Errorf("Prepare = %q, want the given %q", dir, mounted)
	}
	mgr := &recordingManager{}
	if err := p.Start(t.Context(), mgr); err != nil {
		t.Fatal(err)
	}
	check, ok := mgr.ready[ReadyCheckName]
	if !ok || len(mgr.runnables) != 0 {
		t.Fatalf("ready checks %v and %d runnables, want only the %q check", mgr.ready, len(mgr.runnables), ReadyCheckName)
	}
	// Not ready until cert-manager's files are mounted, then ready.
	if err := check(&http.Request{}); err == nil {
		t.Error("ready without certificate files")
	}
	b, err := (&PublicKeyInfrastructure{Client: fake.NewClientBuilder().Build(), Namespace: "ns", SecretName: "tls",
		Hosts: []string{"svc.ns.svc"}, CALifetime: time.Hour, CertLifetime: time.Hour / 2, RenewBefore: time.Minute,
		Log: logr.Discard()}).Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WriteFiles(mounted); err != nil {
		t.Fatal(err)
	}
	if err := check(&http.Request{}); err != nil {
		t.Errorf("not ready with valid files: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := check(&http.Request{}); err != nil {
		t.Errorf("Close touched cert-manager's files: %v", err)
	}
}
