// Package serving checks how configstamp serves its HTTPS endpoints, as a
// kubebuilder v4 project does: /metrics over HTTPS, every scrape
// authenticated (TokenReview) and authorized (SubjectAccessReview) by the API
// server, and HTTP/2 refused on the webhook and metrics servers unless
// --enable-http2.
//
// configstamp runs with the in-cluster metrics setting (--metrics-secure, the
// default) under exactly the identity config/selfsigned installs, so the
// shipped metrics-auth ClusterRole is what lets it review scrapes, and the
// scraper is bound to the shipped metrics-reader ClusterRole. Only etcd and
// kube-apiserver run: nothing here needs pods.
package serving

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/test/framework"
)

// The names config/selfsigned gives (test/manifests pins them).
const (
	ownNamespace   = framework.OwnNamespace
	serviceAccount = "configstamp-controller-manager"
	mwcName        = "configstamp-mutating-webhook-configuration"
	metricsReader  = "configstamp-metrics-reader"
)

var (
	env   *framework.Env
	admin kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{
		Prepare: installRBAC,
		// /metrics as in a cluster: HTTPS, every scrape authorized.
		Args: []string{"--metrics-secure=true", "--webhook-config-name=" + mwcName, "--tls-secret=configstamp-webhook-tls"},
	}))
}

// installRBAC applies config/selfsigned's identity and RBAC and returns a
// kubeconfig holding only a token of its ServiceAccount.
func installRBAC(ctx context.Context, e *framework.Env) (string, error) {
	if err := e.ApplyKustomize(ctx, "config/selfsigned", framework.InstallKinds...); err != nil {
		return "", err
	}
	var err error
	if admin, err = kubernetes.NewForConfig(e.Config); err != nil {
		return "", err
	}
	return e.ServiceAccountKubeconfig(ctx, ownNamespace, serviceAccount)
}

// newServiceAccount creates a ServiceAccount in a new namespace and returns
// its namespace and a token.
func newServiceAccount(t *testing.T, name string) (string, string) {
	t.Helper()
	ns := env.Namespace(t, name, nil)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServiceAccount %s/%s: %v", ns, name, err)
	}
	token, err := env.ServiceAccountToken(t.Context(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return ns, token
}

// scrape GETs /metrics over HTTPS (the server's certificate is self-signed)
// with token as bearer token ("" sends none) and returns the status and body.
func scrape(t *testing.T, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+env.Configstamp.MetricsAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET https://%s/metrics: %v", env.Configstamp.MetricsAddr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// short is the start of a response body, for a failure message.
func short(body string) string {
	body = strings.TrimSpace(body)
	if len(body) > 120 {
		return body[:120] + "…"
	}
	return body
}

func TestMetricsRefusesAnonymousAndUnauthorized(t *testing.T) {
	if code, body := scrape(t, ""); code != http.StatusUnauthorized {
		t.Errorf("scrape without a token: %d %q, want 401", code, short(body))
	}
	// controller-runtime's filter (v0.24) answers a token the API server
	// rejects with 500 "Authentication failed" rather than 401: refused all
	// the same, no metrics.
	if code, body := scrape(t, "not-a-token"); code == http.StatusOK || strings.Contains(body, "controller_runtime_") {
		t.Errorf("scrape with an invalid token: %d with metrics, want a refusal", code)
	}
	// Authenticated, but not allowed get on /metrics.
	_, token := newServiceAccount(t, "stranger")
	if code, body := scrape(t, token); code != http.StatusForbidden {
		t.Errorf("scrape by a ServiceAccount without metrics-reader: %d %q, want 403", code, short(body))
	}
	// Plain HTTP on the metrics port gets no metrics.
	resp, err := http.Get("http://" + env.Configstamp.MetricsAddr + "/metrics")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "controller_runtime_") {
			t.Errorf("plain HTTP scrape: %s with metrics, want a refusal", resp.Status)
		}
	}
}

func TestMetricsServeMetricsReader(t *testing.T) {
	ns, token := newServiceAccount(t, "prometheus")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsReader},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("binding %s: %v", metricsReader, err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.WithoutCancel(t.Context()), binding.Name, metav1.DeleteOptions{})
	})
	// Wait until the API server's RBAC authorizer has seen the binding, so
	// configstamp's first SubjectAccessReview is not denied (and the denial
	// cached for 30 s).
	user := "system:serviceaccount:" + ns + ":prometheus"
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return sar.Status.Allowed, fmt.Sprintf("%s may not get /metrics yet: %s", user, sar.Status.Reason)
	})

	code, body := scrape(t, token)
	if code != http.StatusOK {
		t.Fatalf("scrape by %s bound to %s: %d %q, want 200", user, metricsReader, code, short(body))
	}
	// The controllers' families appear once they start, on the leader: a
	// scrape right after /readyz may come before the lease is won.
	began := time.Now()
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		_, body = scrape(t, token)
		for _, family := range []string{"controller_runtime_reconcile_total", "go_goroutines"} {
			if !strings.Contains(body, family) {
				return false, "/metrics lacks " + family
			}
		}
		return true, ""
	})
	t.Logf("the controllers' metrics were served %v after the first scrape", time.Since(began).Round(time.Millisecond))
	// The framework's scraper over HTTPS with the same token.
	env.MetricsToken = token
	if _, err := env.Configstamp.Metrics("controller_runtime_reconcile_total"); err != nil {
		t.Errorf("framework Metrics over HTTPS: %v", err)
	}
}

// endpoints are configstamp's two TLS servers.
func endpoints() map[string]string {
	return map[string]string{
		"webhook": net.JoinHostPort("127.0.0.1", strconv.Itoa(env.Configstamp.WebhookPort)),
		"metrics": env.Configstamp.MetricsAddr,
	}
}

// handshake dials addr offering protos in ALPN and returns the negotiated protocol.
func handshake(ctx context.Context, addr string, protos ...string) (string, error) {
	d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: protos}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	return conn.(*tls.Conn).ConnectionState().NegotiatedProtocol, nil
}

// h2Client speaks HTTP/2 when the server offers it.
func h2Client() *http.Client {
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		ForceAttemptHTTP2: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
	}}
}

// protoOf sends one request to https://addr/path with an HTTP/2-capable
// client and returns the protocol of the response.
func protoOf(t *testing.T, addr, path string) string {
	t.Helper()
	resp, err := h2Client().Get("https://" + addr + path)
	if err != nil {
		t.Fatalf("GET https://%s%s: %v", addr, path, err)
	}
	_ = resp.Body.Close()
	return resp.Proto
}

func TestHTTP2RefusedByDefault(t *testing.T) {
	for name, addr := range endpoints() {
		t.Run(name, func(t *testing.T) {
			got, err := handshake(t.Context(), addr, "h2", "http/1.1")
			if err != nil || got != "http/1.1" {
				t.Errorf("ALPN h2,http/1.1: negotiated %q (%v), want http/1.1", got, err)
			}
			if got, err := handshake(t.Context(), addr, "h2"); err == nil {
				t.Errorf("ALPN h2 only: negotiated %q, want a failed handshake", got)
			}
			if proto := protoOf(t, addr, "/metrics"); proto != "HTTP/1.1" {
				t.Errorf("an HTTP/2-capable client got %s, want HTTP/1.1", proto)
			}
		})
	}
}

// TestHTTP2WhenEnabled is the control: with --enable-http2 the same checks see
// HTTP/2, so TestHTTP2RefusedByDefault can tell the difference.
func TestHTTP2WhenEnabled(t *testing.T) {
	if err := env.Configstamp.RestartWith(t.Context(), "--enable-http2"); err != nil {
		t.Fatalf("restarting configstamp with --enable-http2: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Configstamp.Restart(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("restarting configstamp without --enable-http2: %v", err)
		}
	})
	for name, addr := range endpoints() {
		t.Run(name, func(t *testing.T) {
			if got, err := handshake(t.Context(), addr, "h2", "http/1.1"); err != nil || got != "h2" {
				t.Errorf("ALPN h2,http/1.1 with --enable-http2: negotiated %q (%v), want h2", got, err)
			}
			if proto := protoOf(t, addr, "/metrics"); proto != "HTTP/2.0" {
				t.Errorf("an HTTP/2-capable client got %s with --enable-http2, want HTTP/2.0", proto)
			}
		})
	}
}
