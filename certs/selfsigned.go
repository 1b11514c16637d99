// Package certs provides the webhook's serving certificate.
//
// In self-managed mode (clusters without cert-manager, the local demo, the tests)
// configstamp makes an ECDSA CA and a serving certificate with cert-manager's
// pkg/util/pki helpers and keeps them in one Secret in its own namespace, so that
// every replica serves with the same CA. In cert-manager mode the files are mounted
// and the CA bundle is injected by cert-manager's cainjector; nothing here runs.
package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cert-manager/cert-manager/pkg/util/pki"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of the self-managed Secret.
const (
	KeyCACert  = "ca.crt"
	KeyCAKey   = "ca.key"
	KeyTLSCert = corev1.TLSCertKey
	KeyTLSKey  = corev1.TLSPrivateKeyKey
)

// PublicKeyInfrastructure is the self-managed CA and serving certificate of the webhook.
type PublicKeyInfrastructure struct {
	// Client reads and writes the Secret (a direct client: this runs before the cache).
	Client client.Client
	// Namespace and SecretName locate the Secret shared by every replica.
	Namespace  string
	SecretName string
	// Hosts are the DNS names and IP addresses the serving certificate is valid for.
	Hosts []string
	// CALifetime and CertLifetime are the validity periods of what is made here.
	CALifetime   time.Duration
	CertLifetime time.Duration
	// RenewBefore: a certificate with less validity left than this is made anew.
	RenewBefore time.Duration
	Log         logr.Logger
}

// Bundle is what the webhook server and the MutatingWebhookConfiguration need.
type Bundle struct {
	CACert  []byte
	TLSCert []byte
	TLSKey  []byte
}

// Ensure returns a valid bundle, creating or renewing the Secret when needed.
// Replicas racing here are kept consistent by the API server's optimistic
// concurrency: the loser of a create or update reads the winner's Secret.
func (p *PublicKeyInfrastructure) Ensure(ctx context.Context) (*Bundle, error) {
	for attempt := 0; attempt < 5; attempt++ {
		secret := &corev1.Secret{}
		err := p.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.SecretName}, secret)
		switch {
		case apierrors.IsNotFound(err):
			secret = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.SecretName,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "configstamp"}},
				Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{},
			}
			if err := p.fill(secret); err != nil {
				return nil, err
			}
			if err := p.Client.Create(ctx, secret); err != nil {
				if apierrors.IsAlreadyExists(err) {
					continue
				}
				return nil, fmt.Errorf("while creating secret %s/%s: %w", p.Namespace, p.SecretName, err)
			}
			p.Log.Info("created webhook CA and serving certificate", "secret", p.SecretName)
			return bundleOf(secret), nil
		case err != nil:
			return nil, fmt.Errorf("while reading secret %s/%s: %w", p.Namespace, p.SecretName, err)
		}
		if p.valid(secret) {
			return bundleOf(secret), nil
		}
		if err := p.fill(secret); err != nil {
			return nil, err
		}
		if err := p.Client.Update(ctx, secret); err != nil {
			if apierrors.IsConflict(err) {
				continue
			}
			return nil, fmt.Errorf("while updating secret %s/%s: %w", p.Namespace, p.SecretName, err)
		}
		p.Log.Info("renewed webhook serving certificate", "secret", p.SecretName)
		return bundleOf(secret), nil
	}
	return nil, fmt.Errorf("while ensuring secret %s/%s: too many conflicts", p.Namespace, p.SecretName)
}

// WriteFiles writes tls.crt and tls.key for controller-runtime's webhook server.
func (b *Bundle) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{KeyTLSCert: b.TLSCert, KeyTLSKey: b.TLSKey, KeyCACert: b.CACert} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("while writing %s: %w", name, err)
		}
	}
	return nil
}

func bundleOf(s *corev1.Secret) *Bundle {
	return &Bundle{CACert: s.Data[KeyCACert], TLSCert: s.Data[KeyTLSCert], TLSKey: s.Data[KeyTLSKey]}
}

// valid reports whether the Secret's CA and leaf are usable for longer than
// RenewBefore and the leaf covers every host.
func (p *PublicKeyInfrastructure) valid(s *corev1.Secret) bool {
	ca, err := pki.DecodeX509CertificateBytes(s.Data[KeyCACert])
	if err != nil || !p.fresh(ca) {
		return false
	}
	if _, err := pki.DecodePrivateKeyBytes(s.Data[KeyCAKey]); err != nil {
		return false
	}
	leaf, err := pki.DecodeX509CertificateBytes(s.Data[KeyTLSCert])
	if err != nil || !p.fresh(leaf) || leaf.CheckSignatureFrom(ca) != nil {
		return false
	}
	for _, h := range p.Hosts {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	_, err = pki.DecodePrivateKeyBytes(s.Data[KeyTLSKey])
	return err == nil
}

func (p *PublicKeyInfrastructure) fresh(c *x509.Certificate) bool {
	return time.Now().Add(p.RenewBefore).Before(c.NotAfter)
}

// fill makes what is missing or stale: the CA only when it is itself stale, the
// leaf always (a new CA needs a new leaf; otherwise the leaf was the stale part).
func (p *PublicKeyInfrastructure) fill(s *corev1.Secret) error {
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	ca, caErr := pki.DecodeX509CertificateBytes(s.Data[KeyCACert])
	caKey, keyErr := pki.DecodePrivateKeyBytes(s.Data[KeyCAKey])
	if caErr != nil || keyErr != nil || !p.fresh(ca) {
		var err error
		ca, caKey, err = p.newCA(s)
		if err != nil {
			return err
		}
	}
	return p.newLeaf(s, ca, caKey)
}

func (p *PublicKeyInfrastructure) newCA(s *corev1.Secret) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		return nil, nil, fmt.Errorf("while generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "configstamp-webhook-ca"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(p.CALifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	certPEM, cert, err := pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("while signing CA: %w", err)
	}
	keyPEM, err := pki.EncodeECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	s.Data[KeyCACert] = certPEM
	s.Data[KeyCAKey] = keyPEM
	return cert, key, nil
}

func (p *PublicKeyInfrastructure) newLeaf(s *corev1.Secret, ca *x509.Certificate, caKey any) error {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		return fmt.Errorf("while generating serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "configstamp-webhook"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(p.CertLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range p.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	certPEM, _, err := pki.SignCertificate(tmpl, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("while signing serving certificate: %w", err)
	}
	keyPEM, err := pki.EncodeECPrivateKey(key)
	if err != nil {
		return err
	}
	s.Data[KeyTLSCert] = certPEM
	s.Data[KeyTLSKey] = keyPEM
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}

// SameCA reports whether two PEM bundles are byte-identical (for skipping no-op writes).
func SameCA(a, b []byte) bool { return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) }
