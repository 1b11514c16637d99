package main

import (
	"crypto/tls"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/certs"
)

func TestTLSOptionsDisableHTTP2(t *testing.T) {
	for _, enable := range []bool{false, true} {
		// controller-runtime's servers start from NextProtos [h2] and apply TLSOpts.
		cfg := &tls.Config{NextProtos: []string{"h2"}}
		for _, opt := range tlsOptions(enable) {
			opt(cfg)
		}
		want := []string{"http/1.1"}
		if enable {
			want = []string{"h2"}
		}
		if len(cfg.NextProtos) != len(want) || cfg.NextProtos[0] != want[0] {
			t.Errorf("enableHTTP2=%v: NextProtos %v, want %v", enable, cfg.NextProtos, want)
		}
	}
}

func TestMetricsOptions(t *testing.T) {
	tlsOpts := tlsOptions(false)
	secure := metricsOptions(":8443", true, "/certs", tlsOpts, logr.Discard())
	if !secure.SecureServing || secure.FilterProvider == nil || secure.CertDir != "/certs" || len(secure.TLSOpts) != 1 {
		t.Errorf("--metrics-secure: %+v, want HTTPS, the authn/authz filter, the cert dir and the TLS options", secure)
	}
	plain := metricsOptions("127.0.0.1:8080", false, "", tlsOpts, logr.Discard())
	if plain.SecureServing || plain.FilterProvider != nil || plain.BindAddress != "127.0.0.1:8080" {
		t.Errorf("--metrics-secure=false: %+v, want plain HTTP without a filter", plain)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.1:8080": false, "0": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestCertProviderPerMode(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	base := options{namespace: "ns", webhookService: "svc", webhookConfigName: "mwc", tlsSecret: "tls"}

	o := base
	o.certMode, o.webhookURL = "self", "https://127.0.0.1:9443"
	p, host, err := certProvider(&o, c, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	self, ok := p.(*certs.SelfManaged)
	if !ok || host != "127.0.0.1" || len(self.PKI.Hosts) != 1 || self.PKI.Hosts[0] != "127.0.0.1" || self.WebhookConfigName != "mwc" {
		t.Errorf("self mode with --webhook-url: %T host %q, want SelfManaged for 127.0.0.1 bound to 127.0.0.1", p, host)
	}

	o = base
	o.certMode = "self"
	p, host, err = certProvider(&o, c, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if self, ok := p.(*certs.SelfManaged); !ok || host != "" || len(self.PKI.Hosts) != 2 || self.PKI.Hosts[0] != "svc.ns.svc" {
		t.Errorf("self mode in a cluster: %T host %q, want SelfManaged for svc.ns.svc on every address", p, host)
	}

	o = base
	o.certMode, o.certDir, o.webhookHost = "cert-manager", "/mounted", "127.0.0.1"
	p, host, err = certProvider(&o, c, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if cm, ok := p.(*certs.CertManagerFiles); !ok || cm.CertDir != "/mounted" || host != "127.0.0.1" {
		t.Errorf("cert-manager mode: %T host %q, want CertManagerFiles of /mounted bound to 127.0.0.1", p, host)
	}

	o = base
	o.certMode = "vault"
	if _, _, err := certProvider(&o, c, logr.Discard()); err == nil {
		t.Error("an unknown --cert-mode was accepted")
	}
	o = base
	o.certMode, o.webhookURL = "self", "http://127.0.0.1:9443"
	if _, _, err := certProvider(&o, c, logr.Discard()); err == nil {
		t.Error("a non-https --webhook-url was accepted")
	}
}
