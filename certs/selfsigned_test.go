package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestEnsureCreatesReusesAndRenews(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	p := &PublicKeyInfrastructure{Client: c, Namespace: "ns", SecretName: "tls", Hosts: []string{"127.0.0.1", "svc.ns.svc"},
		CALifetime: 24 * time.Hour, CertLifetime: time.Hour, RenewBefore: 10 * time.Minute, Log: logr.Discard()}
	first, err := p.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(first.TLSCert, first.TLSKey)
	if err != nil {
		t.Fatalf("serving pair: %v", err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(first.CACert) {
		t.Fatal("CA bundle does not parse")
	}
	for _, h := range p.Hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: h}); err != nil {
			t.Errorf("leaf not valid for %s under the CA: %v", h, err)
		}
	}

	again, err := p.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.TLSCert, first.TLSCert) {
		t.Fatal("a valid certificate was replaced")
	}

	// Renewal point inside the leaf's lifetime but not the CA's: new leaf, same CA.
	p.RenewBefore = 2 * time.Hour
	renewed, err := p.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(renewed.TLSCert, first.TLSCert) || !bytes.Equal(renewed.CACert, first.CACert) {
		t.Fatalf("want a new leaf under the same CA (leaf changed %v, CA changed %v)",
			!bytes.Equal(renewed.TLSCert, first.TLSCert), !bytes.Equal(renewed.CACert, first.CACert))
	}

	// Another host: the leaf is made anew.
	p.RenewBefore = 10 * time.Minute
	p.Hosts = append(p.Hosts, "other.example")
	moved, err := p.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(moved.TLSCert, renewed.TLSCert) {
		t.Fatal("leaf not remade for a new host")
	}
}

func TestFilesValid(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	p := &PublicKeyInfrastructure{Client: c, Namespace: "ns", SecretName: "tls", Hosts: []string{"localhost"},
		CALifetime: time.Hour, CertLifetime: time.Hour, Log: logr.Discard()}
	b, err := p.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	check := FilesValid(dir)
	if err := check(&http.Request{}); err == nil {
		t.Fatal("ready without files")
	}
	if err := b.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	if err := check(&http.Request{}); err != nil {
		t.Fatalf("not ready with valid files: %v", err)
	}
}
