package certs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Provider is one certificate mode of the webhook server. The mode is chosen
// once (cmd); the rest of the start-up talks only to this interface:
//
//	dir, err := p.Prepare(ctx)     // before the manager: the webhook server's --cert-dir
//	defer p.Close()
//	... manager with a webhook server serving dir ...
//	err = p.Start(ctx, mgr)        // after the webhook is set up, before mgr.Start
type Provider interface {
	// Prepare runs before the manager is created and returns the directory of
	// tls.crt and tls.key the webhook server serves (hot-reloaded).
	Prepare(ctx context.Context) (certDir string, err error)
	// Start adds to mgr what keeps the served certificate valid (runnables,
	// the CA bundle) and the ready check that says so.
	Start(ctx context.Context, mgr manager.Manager) error
	// Close removes what Prepare made for this process alone.
	Close() error
}

// ReadyCheckName is the name of the /readyz check every Provider adds: ready
// only while the served files form a currently valid key pair.
const ReadyCheckName = "certificate"

// DefaultCertManagerDir is where the manager Deployment mounts cert-manager's
// Secret (controller-runtime's default webhook certificate directory).
func DefaultCertManagerDir() string {
	return filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
}

// CertManagerFiles serves files that something else writes: cert-manager's
// Secret mounted by the kubelet, renewed by cert-manager, the CA bundle
// injected by its cainjector.
type CertManagerFiles struct {
	// CertDir is the mounted directory; "" is DefaultCertManagerDir.
	CertDir string
}

var _ Provider = &CertManagerFiles{}

// Prepare returns the mounted directory; the files may appear later (the
// ready check waits for them).
func (c *CertManagerFiles) Prepare(context.Context) (string, error) {
	if c.CertDir == "" {
		c.CertDir = DefaultCertManagerDir()
	}
	return c.CertDir, nil
}

// Start adds the ready check: the webhook server's certificate watcher
// reloads the files, and the replica is ready only while they are valid.
func (c *CertManagerFiles) Start(_ context.Context, mgr manager.Manager) error {
	if err := mgr.AddReadyzCheck(ReadyCheckName, FilesValid(c.CertDir)); err != nil {
		return fmt.Errorf("while adding the certificate ready check: %w", err)
	}
	return nil
}

// Close does nothing: the files are not configstamp's.
func (c *CertManagerFiles) Close() error { return nil }

// SelfManaged makes and renews the CA and serving certificate itself (PKI,
// kept in a Secret every replica shares), writes them where the webhook
// server reads them and keeps the CA bundle of the MutatingWebhookConfiguration.
type SelfManaged struct {
	PKI *PublicKeyInfrastructure
	// CertDir is where the pair is written; "" is a temporary directory that
	// Close removes.
	CertDir string
	// WebhookConfigName is the MutatingWebhookConfiguration whose caBundles
	// the Rotator keeps.
	WebhookConfigName string
	// CheckInterval is the Rotator's; 0 is its default.
	CheckInterval time.Duration
	// Register writes the MutatingWebhookConfiguration with caBundle (the
	// current CA and, during a CA rotation, the previous one). Called once in
	// Start, before the Rotator's first check.
	Register func(ctx context.Context, caBundle []byte) error
	Log      logr.Logger

	bundle  *Bundle
	rotator *Rotator
	tempDir string
}

var _ Provider = &SelfManaged{}

// Prepare validates the lifetimes, makes sure the Secret holds a valid pair
// (creating or renewing it) and writes it into CertDir.
func (s *SelfManaged) Prepare(ctx context.Context) (string, error) {
	if s.PKI == nil || s.Register == nil {
		return "", errors.New("self-managed certificates need a PKI and a Register function")
	}
	s.rotator = &Rotator{PKI: s.PKI, WebhookConfigName: s.WebhookConfigName, Interval: s.CheckInterval, Log: s.Log}
	if err := s.rotator.Validate(); err != nil {
		return "", err
	}
	bundle, err := s.PKI.Ensure(ctx)
	if err != nil {
		return "", err
	}
	if s.CertDir == "" {
		if s.tempDir, err = os.MkdirTemp("", "configstamp-certs-"); err != nil {
			return "", fmt.Errorf("while creating a directory for the certificate files: %w", err)
		}
		s.CertDir = s.tempDir
	}
	if err := bundle.WriteFiles(s.CertDir); err != nil {
		return "", fmt.Errorf("while writing the certificate files: %w", err)
	}
	s.bundle = bundle
	s.rotator.CertDir = s.CertDir
	return s.CertDir, nil
}

// Start registers the webhook configuration with the CA bundle, runs one
// rotation check at once (a replica starting during a CA rotation trusts the
// CA its peers still serve with), then adds the Rotator and the ready check.
func (s *SelfManaged) Start(ctx context.Context, mgr manager.Manager) error {
	if s.bundle == nil {
		return errors.New("self-managed certificates: Start before Prepare")
	}
	if err := s.Register(ctx, s.bundle.CABundle()); err != nil {
		return err
	}
	if err := s.rotator.Check(ctx); err != nil {
		return err
	}
	if err := mgr.Add(s.rotator); err != nil {
		return fmt.Errorf("while adding the certificate rotator: %w", err)
	}
	if err := mgr.AddReadyzCheck(ReadyCheckName, FilesValid(s.CertDir)); err != nil {
		return fmt.Errorf("while adding the certificate ready check: %w", err)
	}
	return nil
}

// Close removes the temporary directory Prepare made, if any.
func (s *SelfManaged) Close() error {
	if s.tempDir == "" {
		return nil
	}
	if err := os.RemoveAll(s.tempDir); err != nil {
		return fmt.Errorf("while removing the certificate files: %w", err)
	}
	return nil
}
