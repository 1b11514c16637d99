// Package certs provides the webhook's serving certificate.
//
// In self-managed mode (clusters without cert-manager, the local demo, the tests)
// configstamp makes an ECDSA CA and a serving certificate with cert-manager's
// pkg/util/pki helpers and keeps them in one Secret in its own namespace, so that
// every replica serves with the same CA. A Rotator on every replica renews them
// before they expire, swaps the served files and keeps the CA bundle of the
// MutatingWebhookConfiguration at the current CA plus, during a CA rotation, the
// previous one. In cert-manager mode the files are mounted and the CA bundle is
// injected by cert-manager's cainjector; nothing here runs.
package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
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
	// KeyPreviousCACert is the CA that the current one replaced, kept (and kept
	// in the webhook's CA bundle) until it expires: replicas still serving a leaf
	// of the old CA stay trusted while they switch. A CA is replaced when it has
	// less than RenewBefore left, so it is dropped at most RenewBefore later.
	KeyPreviousCACert = "ca-previous.crt"
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
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// Bundle is what the webhook server and the MutatingWebhookConfiguration need.
type Bundle struct {
	// CACert is the current CA, which signed TLSCert.
	CACert  []byte
	TLSCert []byte
	TLSKey  []byte
	// PreviousCACert is the CA the current one replaced, while it is valid.
	PreviousCACert []byte
}

// CABundle is what API servers must trust: the current CA, then the previous
// one during a CA rotation.
func (b *Bundle) CABundle() []byte {
	return joinPEM(b.CACert, b.PreviousCACert)
}

func joinPEM(blocks ...[]byte) []byte {
	var out []byte
	for _, b := range blocks {
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		out = append(out, bytes.TrimSpace(b)...)
		out = append(out, '\n')
	}
	return out
}

func (p *PublicKeyInfrastructure) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
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
			if _, err := p.fill(secret); err != nil {
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
		did, err := p.fill(secret)
		if err != nil {
			return nil, err
		}
		if err := p.Client.Update(ctx, secret); err != nil {
			if apierrors.IsConflict(err) {
				// Another replica renewed first: use its Secret (read again).
				continue
			}
			return nil, fmt.Errorf("while updating secret %s/%s: %w", p.Namespace, p.SecretName, err)
		}
		p.Log.Info("renewed webhook certificates", "secret", p.SecretName, "changes", did,
			"caNotAfter", notAfter(secret.Data[KeyCACert]), "certNotAfter", notAfter(secret.Data[KeyTLSCert]))
		return bundleOf(secret), nil
	}
	return nil, fmt.Errorf("while ensuring secret %s/%s: too many conflicts", p.Namespace, p.SecretName)
}

func bundleOf(s *corev1.Secret) *Bundle {
	return &Bundle{CACert: s.Data[KeyCACert], TLSCert: s.Data[KeyTLSCert], TLSKey: s.Data[KeyTLSKey],
		PreviousCACert: s.Data[KeyPreviousCACert]}
}

// caBundle is the CA bundle the Secret s stands for now: its CA and its
// previous CA unless that has expired.
func (p *PublicKeyInfrastructure) caBundle(s *corev1.Secret) []byte {
	b := bundleOf(s)
	if !p.previousUsable(s) {
		b.PreviousCACert = nil
	}
	return b.CABundle()
}

func notAfter(certPEM []byte) string {
	c, err := pki.DecodeX509CertificateBytes(certPEM)
	if err != nil {
		return "invalid"
	}
	return c.NotAfter.UTC().Format(time.RFC3339)
}

// valid reports whether the Secret's CA and leaf are usable for longer than
// RenewBefore, the leaf is the CA's and covers every host, and the previous CA,
// if any, has not expired.
func (p *PublicKeyInfrastructure) valid(s *corev1.Secret) bool {
	ca, ok := p.caValid(s)
	if !ok || !p.leafValid(s, ca) {
		return false
	}
	_, hasPrevious := s.Data[KeyPreviousCACert]
	return !hasPrevious || p.previousUsable(s)
}

func (p *PublicKeyInfrastructure) caValid(s *corev1.Secret) (*x509.Certificate, bool) {
	ca, err := pki.DecodeX509CertificateBytes(s.Data[KeyCACert])
	if err != nil || !p.fresh(ca) {
		return nil, false
	}
	if _, err := pki.DecodePrivateKeyBytes(s.Data[KeyCAKey]); err != nil {
		return nil, false
	}
	return ca, true
}

func (p *PublicKeyInfrastructure) leafValid(s *corev1.Secret, ca *x509.Certificate) bool {
	leaf, err := pki.DecodeX509CertificateBytes(s.Data[KeyTLSCert])
	if err != nil || !p.fresh(leaf) || leaf.CheckSignatureFrom(ca) != nil {
		return false
	}
	for _, h := range p.Hosts {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	_, err = tls.X509KeyPair(s.Data[KeyTLSCert], s.Data[KeyTLSKey])
	return err == nil
}

// previousUsable: the Secret holds a previous CA that has not expired.
func (p *PublicKeyInfrastructure) previousUsable(s *corev1.Secret) bool {
	prev, err := pki.DecodeX509CertificateBytes(s.Data[KeyPreviousCACert])
	return err == nil && p.now().Before(prev.NotAfter)
}

func (p *PublicKeyInfrastructure) fresh(c *x509.Certificate) bool {
	return p.now().Add(p.RenewBefore).Before(c.NotAfter)
}

// fill makes what is missing or stale and says what it did. A stale CA is
// replaced and kept as the previous CA (if it has not expired yet), and a new
// CA always gets a new leaf; otherwise the leaf is made anew only when it is
// stale itself. A previous CA that has expired is dropped.
func (p *PublicKeyInfrastructure) fill(s *corev1.Secret) ([]string, error) {
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	var did []string
	ca, caOK := p.caValid(s)
	if !caOK {
		oldPEM := s.Data[KeyCACert]
		old, oldErr := pki.DecodeX509CertificateBytes(oldPEM)
		newCA, _, err := p.newCA(s)
		if err != nil {
			return nil, err
		}
		ca = newCA
		if oldErr == nil && p.now().Before(old.NotAfter) {
			s.Data[KeyPreviousCACert] = oldPEM
			did = append(did, "rotated CA (previous CA kept in the bundle until "+old.NotAfter.UTC().Format(time.RFC3339)+")")
		} else {
			delete(s.Data, KeyPreviousCACert)
			did = append(did, "made CA")
		}
	} else if _, has := s.Data[KeyPreviousCACert]; has && !p.previousUsable(s) {
		delete(s.Data, KeyPreviousCACert)
		did = append(did, "dropped expired previous CA")
	}
	if !caOK || !p.leafValid(s, ca) {
		caKey, err := pki.DecodePrivateKeyBytes(s.Data[KeyCAKey])
		if err != nil {
			return nil, err
		}
		if err := p.newLeaf(s, ca, caKey); err != nil {
			return nil, err
		}
		did = append(did, "made serving certificate")
	}
	return did, nil
}

func (p *PublicKeyInfrastructure) newCA(s *corev1.Secret) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		return nil, nil, fmt.Errorf("while generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "configstamp-webhook-ca"},
		NotBefore:             p.now().Add(-time.Minute),
		NotAfter:              p.now().Add(p.CALifetime),
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
		NotBefore:    p.now().Add(-time.Minute),
		NotAfter:     p.now().Add(p.CertLifetime),
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
