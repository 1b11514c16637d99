package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The floor: a webhook that admits every Deployment unchanged, answered by
// this process on the same machine, registered on the same control plane.
// The same CREATEs through it, at the same concurrency, are what any mutating
// webhook costs (TLS, the API server's admission call, decoding the review):
// configstamp's admission latency is quoted next to it.
const (
	noopWebhookName = "noop.bench.example" // not *.configstamp.io: kept apart in the API server's histograms
	noopLabel       = "bench.example/noop"
)

// noopWebhook serves the floor and registers it for ops (default: CREATE);
// stop removes both.
func noopWebhook(ctx context.Context, e *env, ops ...admissionregistrationv1.OperationType) (stop func(), err error) {
	if len(ops) == 0 {
		ops = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
	}
	certPEM, cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(admitUnchanged)}
	go func() { _ = srv.Serve(ln) }()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-noop"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: noopWebhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL: ptr.To("https://" + ln.Addr().String() + "/mutate"), CABundle: certPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: ops,
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"},
					Resources: []string{"deployments"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{noopLabel: "true"}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail), // a floor that fails open would measure nothing
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
	if err := e.client.Create(ctx, cfg); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("registering the no-op webhook: %w", err)
	}
	return func() {
		_ = e.client.Delete(context.WithoutCancel(ctx), cfg)
		_ = srv.Close()
	}, nil
}

// admitUnchanged answers an AdmissionReview: allowed, no patch.
func admitUnchanged(w http.ResponseWriter, r *http.Request) {
	review := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// selfSigned makes a certificate for 127.0.0.1, valid for a day.
func selfSigned() ([]byte, tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench-noop"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return certPEM, cert, err
}
