// Package rbac runs configstamp under exactly the identity config/selfsigned
// installs: its ServiceAccount, bound to the ClusterRoles and Roles of
// config/rbac (generated from the +kubebuilder:rbac markers) and the overlay's
// webhook-config ClusterRole, with a token from the TokenRequest API. It proves
// what that identity cannot do (access reviews) and that configstamp still
// works with it: stamping at CREATE, re-stamping on a ConfigMap change, and
// rotating its certificates (Secret update, CA bundle patch), with no
// Forbidden in its log.
package rbac

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/configstamp/configstamp/certs"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// The names config/selfsigned gives (test/manifests pins them).
const (
	ownNamespace   = framework.OwnNamespace
	serviceAccount = "configstamp-controller-manager"
	mwcName        = "configstamp-mutating-webhook-configuration"
	tlsSecret      = "configstamp-webhook-tls"
)

var (
	env *framework.Env
	// sa is a clientset authenticated as configstamp's ServiceAccount, admin one as the suite's admin.
	sa, admin kubernetes.Interface
	saUser    = "system:serviceaccount:" + ownNamespace + ":" + serviceAccount
	saGroups  = []string{"system:serviceaccounts", "system:serviceaccounts:" + ownNamespace, "system:authenticated"}
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{
		Prepare: installRBAC,
		Args: []string{
			"--webhook-config-name=" + mwcName, "--tls-secret=" + tlsSecret,
			// Rotate within the suite, so the rotation's writes run under the role too.
			"--ca-lifetime=30s", "--cert-lifetime=12s", "--renew-before=6s", "--cert-check-interval=1s",
			"--max-concurrent-rollouts=0", "--halt-on-failure=false", "--debounce=0",
		},
	}))
}

// installRBAC applies the overlay's RBAC, ServiceAccount, Namespace and
// MutatingWebhookConfiguration, requests a token for the ServiceAccount and
// returns a kubeconfig with only that token.
func installRBAC(ctx context.Context, e *framework.Env) (string, error) {
	if err := e.ApplyKustomize(ctx, "config/selfsigned", framework.InstallKinds...); err != nil {
		return "", err
	}
	path, err := e.ServiceAccountKubeconfig(ctx, ownNamespace, serviceAccount)
	if err != nil {
		return "", err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return "", err
	}
	restCfg.QPS, restCfg.Burst = 200, 400 // hundreds of access reviews
	if sa, err = kubernetes.NewForConfig(restCfg); err != nil {
		return "", err
	}
	adminCfg := rest.CopyConfig(e.Config)
	adminCfg.QPS, adminCfg.Burst = 200, 400
	if admin, err = kubernetes.NewForConfig(adminCfg); err != nil {
		return "", err
	}
	return path, nil
}

func TestRunsAsTheServiceAccount(t *testing.T) {
	if env.ConfigstampKubeconfig == env.Kubeconfig {
		t.Fatal("configstamp runs with the admin kubeconfig")
	}
	kc, err := clientcmd.LoadFromFile(env.ConfigstampKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, ai := range kc.AuthInfos {
		if ai.ClientCertificate != "" || len(ai.ClientCertificateData) > 0 || ai.Token == "" {
			t.Fatalf("configstamp's kubeconfig user %s has a client certificate or no token", name)
		}
	}
	review, err := sa.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Username; got != saUser {
		t.Fatalf("configstamp's token authenticates as %q, want %q", got, saUser)
	}
	t.Logf("configstamp authenticates as %s, groups %v", review.Status.UserInfo.Username, review.Status.UserInfo.Groups)
}

// TestWorksUnderItsRole: the webhook stamps at CREATE (its live reads), the
// reconciler re-stamps after a ConfigMap change (watches, patch, events) and
// nothing configstamp asked for was forbidden.
func TestWorksUnderItsRole(t *testing.T) {
	ns := env.Namespace(t, "rbac", nil)
	dep := env.App(t, ns)
	h1 := framework.TemplateHash(dep) // the Create response: what admission stored
	if !strings.HasPrefix(h1, "v1-") {
		t.Fatalf("not stamped at CREATE under configstamp's role: stamp %q", h1)
	}

	cm := framework.ConfigMap(ns, "app-config", map[string]string{"a": "2"}, nil)
	env.Apply(t, cm)
	got := dep.DeepCopy()
	h2 := env.WaitTemplateHash(t, got, h1)
	if got.Annotations[stamp.AnnotationAppliedHash] != h2 {
		t.Fatalf("record %q != stamp %q", got.Annotations[stamp.AnnotationAppliedHash], h2)
	}
	env.WaitEvent(t, got, "ConfigChanged", "ConfigMap/app-config", h2)
	env.Configstamp.AssertNoneRefused(t, "its role")
}

// access is one access review: may the identity do verb on resource (in
// namespace; "" is every namespace for namespaced resources) — and the answer
// the role must give.
type access struct {
	verb, group, resource, sub, name, namespace string
	allowed                                     bool
}

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.sub != "" {
		r += "/" + a.sub
	}
	if a.name != "" {
		r += "/" + a.name
	}
	ns := a.namespace
	if ns == "" {
		ns = "*"
	}
	return fmt.Sprintf("%s %s in %s", a.verb, r, ns)
}

func (a access) attributes() *authorizationv1.ResourceAttributes {
	return &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub,
		Name: a.name, Namespace: a.namespace}
}

// review asks both ways: SelfSubjectAccessReview with configstamp's token and
// SubjectAccessReview (admin) for its user and groups. They must agree.
func review(t *testing.T, a access) bool {
	t.Helper()
	self, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(),
		&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: a.attributes()}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%v: %v", a, err)
	}
	subject, err := admin.AuthorizationV1().SubjectAccessReviews().Create(t.Context(),
		&authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: a.attributes(),
			User: saUser, Groups: saGroups}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%v: %v", a, err)
	}
	if self.Status.Allowed != subject.Status.Allowed {
		t.Errorf("%v: SelfSubjectAccessReview says %v, SubjectAccessReview %v", a, self.Status.Allowed, subject.Status.Allowed)
	}
	return self.Status.Allowed
}

func TestLeastPrivilege(t *testing.T) {
	other := env.Namespace(t, "elsewhere", nil)
	everywhere := []string{"", ownNamespace, other, "kube-system", "default"}
	writes := []string{"create", "update", "patch", "delete", "deletecollection"}
	var table []access
	add := func(allowed bool, verbs []string, group, resource string, namespaces ...string) {
		for _, v := range verbs {
			for _, ns := range namespaces {
				table = append(table, access{verb: v, group: group, resource: resource, namespace: ns, allowed: allowed})
			}
		}
	}
	// Pods: listed (the pods of a rollout being verified, read live), nothing
	// else: no get, no watch (never cached), no delete, no eviction, no logs.
	add(true, []string{"list"}, "", "pods", everywhere...)
	add(false, append(writes, "get", "watch"), "", "pods", everywhere...)
	for _, ns := range everywhere {
		table = append(table, access{verb: "get", resource: "pods", sub: "log", namespace: ns})
	}
	for _, ns := range everywhere {
		table = append(table, access{verb: "create", resource: "pods", sub: "eviction", namespace: ns})
	}
	// ConfigMaps: read everywhere, never written.
	add(true, []string{"get", "list", "watch"}, "", "configmaps", everywhere...)
	add(false, writes, "", "configmaps", everywhere...)
	// Secrets: read everywhere; created and updated only in configstamp's namespace.
	add(true, []string{"get", "list", "watch"}, "", "secrets", everywhere...)
	add(false, writes, "", "secrets", "", other, "kube-system", "default")
	add(true, []string{"create", "update"}, "", "secrets", ownNamespace)
	add(false, []string{"patch", "delete", "deletecollection"}, "", "secrets", ownNamespace)
	// Workloads: read and patched (the template annotation), never created, updated or deleted.
	for _, r := range []string{"deployments", "statefulsets", "daemonsets"} {
		add(true, []string{"get", "list", "watch", "patch"}, "apps", r, everywhere...)
		add(false, []string{"create", "update", "delete", "deletecollection"}, "apps", r, everywhere...)
	}
	add(false, writes, "apps", "replicasets", everywhere...)
	add(false, writes, "apps", "controllerrevisions", everywhere...)
	add(true, []string{"get", "list", "watch"}, "", "namespaces", "")
	add(false, writes, "", "namespaces", "")
	// Leader election in its own namespace only.
	add(true, []string{"get", "create", "update"}, "coordination.k8s.io", "leases", ownNamespace)
	add(false, []string{"patch", "delete", "deletecollection"}, "coordination.k8s.io", "leases", ownNamespace)
	add(false, []string{"get", "create", "update"}, "coordination.k8s.io", "leases", other, "kube-system")
	// Events: written, never deleted.
	add(true, []string{"create", "patch"}, "events.k8s.io", "events", other)
	add(false, []string{"delete", "deletecollection", "update"}, "events.k8s.io", "events", everywhere...)
	add(false, []string{"delete", "deletecollection"}, "", "events", everywhere...)
	// Its own MutatingWebhookConfiguration by name; no other, no create or delete.
	for _, v := range []string{"get", "update", "patch"} {
		table = append(table, access{verb: v, group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: mwcName, allowed: true})
	}
	for _, v := range []string{"delete"} {
		table = append(table, access{verb: v, group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: mwcName})
	}
	for _, v := range []string{"get", "update", "patch", "delete"} {
		table = append(table, access{verb: v, group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "someone-elses"})
	}
	add(false, []string{"create", "list", "deletecollection"}, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "")
	add(false, []string{"get", "create", "update", "patch", "delete"}, "admissionregistration.k8s.io", "validatingwebhookconfigurations", "")
	// No privilege escalation.
	add(false, []string{"escalate", "bind"}, "rbac.authorization.k8s.io", "clusterroles", "")
	add(false, []string{"escalate", "bind", "create", "update"}, "rbac.authorization.k8s.io", "roles", ownNamespace)
	add(false, []string{"impersonate"}, "", "serviceaccounts", ownNamespace)
	add(false, []string{"impersonate"}, "", "users", "")
	add(false, []string{"create"}, "", "serviceaccounts", ownNamespace)
	table = append(table, access{verb: "create", resource: "serviceaccounts", sub: "token", name: serviceAccount, namespace: ownNamespace})
	add(false, []string{"*"}, "*", "*", everywhere...)

	// Real attempts, not only reviews.
	ctx := t.Context()
	cmClient := sa.CoreV1().ConfigMaps(other)
	_, err := cmClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
	expectForbidden(t, "create a ConfigMap in "+other, err)
	_, err = sa.CoreV1().Secrets(other).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
	expectForbidden(t, "create a Secret in "+other, err)
	err = sa.CoreV1().Secrets(ownNamespace).Delete(ctx, tlsSecret, metav1.DeleteOptions{})
	expectForbidden(t, "delete its own TLS Secret", err)
	err = sa.CoreV1().Pods(other).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	expectForbidden(t, "delete pods in "+other, err)
	probe, err := sa.CoreV1().Secrets(ownNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe"}}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("create a Secret in %s: %v, want allowed", ownNamespace, err)
	} else if err := admin.CoreV1().Secrets(ownNamespace).Delete(ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}

	var allowed, denied int
	for _, a := range table {
		if got := review(t, a); got != a.allowed {
			t.Errorf("%v: allowed=%v, want %v", a, got, a.allowed)
		} else if got {
			allowed++
		} else {
			denied++
		}
	}
	t.Logf("%d access reviews as the ServiceAccount agree with the table: %d allowed, %d denied", len(table), allowed, denied)

	// Whatever the rules say it reads, it cannot delete.
	for _, ns := range []string{ownNamespace, other} {
		rules, err := sa.AuthorizationV1().SelfSubjectRulesReviews().Create(t.Context(),
			&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rules of configstamp's identity in namespace %s (incl. every authenticated user's):", ns)
		for _, r := range rules.Status.ResourceRules {
			var what []string
			for _, g := range r.APIGroups {
				if g == "" {
					g = "core"
				}
				what = append(what, g+"/"+strings.Join(r.Resources, ","))
			}
			names := ""
			if len(r.ResourceNames) > 0 {
				names = " [" + strings.Join(r.ResourceNames, ",") + "]"
			}
			t.Logf("  %s%s: %s", strings.Join(what, " "), names, strings.Join(r.Verbs, ","))
			for _, v := range r.Verbs {
				if v == "delete" || v == "deletecollection" || v == "*" {
					t.Errorf("namespace %s: rule %+v grants %s", ns, r, v)
				}
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					if strings.HasSuffix(res, "reviews") || res == "*" {
						continue
					}
					for _, v := range []string{"delete", "deletecollection"} {
						a := access{verb: v, group: g, resource: res, namespace: ns}
						if len(r.ResourceNames) > 0 {
							a.name = r.ResourceNames[0]
						}
						if review(t, a) {
							t.Errorf("%v allowed: configstamp reads %s and can delete it", a, res)
						}
					}
				}
			}
		}
	}
}

func expectForbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s as configstamp: %v, want Forbidden", what, err)
	}
}

// TestRotatesUnderItsRole waits for a CA rotation (the Secret update, the CA
// bundle patch) and for the served certificate to follow, all as the
// ServiceAccount.
func TestRotatesUnderItsRole(t *testing.T) {
	secret := &corev1.Secret{}
	secret.Namespace, secret.Name = ownNamespace, tlsSecret
	env.Get(t, secret)
	firstCA := string(secret.Data[certs.KeyCACert])
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		env.Get(t, secret)
		if string(secret.Data[certs.KeyCACert]) == firstCA {
			return false, "the CA has not rotated yet"
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		mwc.Name = mwcName
		env.Get(t, mwc)
		for _, w := range mwc.Webhooks {
			if n := bytes.Count(w.ClientConfig.CABundle, []byte("BEGIN CERTIFICATE")); n != 2 {
				return false, fmt.Sprintf("webhook %s trusts %d CAs, want the new and the previous", w.Name, n)
			}
		}
		served, err := servedLeaf(mwc)
		if err != nil {
			return false, err.Error()
		}
		if !bytes.Equal(served, leafDER(t, secret.Data[certs.KeyTLSCert])) {
			return false, "the webhook does not serve the Secret's leaf yet"
		}
		return true, ""
	})
	env.Configstamp.AssertNoneRefused(t, "its role")
}

// servedLeaf completes a TLS handshake with configstamp's webhook, trusting
// only the configuration's CA bundle, and returns the served leaf.
func servedLeaf(mwc *admissionregistrationv1.MutatingWebhookConfiguration) ([]byte, error) {
	roots := x509.NewCertPool()
	if len(mwc.Webhooks) == 0 || !roots.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle) {
		return nil, errors.New("no CA bundle")
	}
	conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(env.Configstamp.WebhookPort),
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].Raw, nil
}

func leafDER(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("the Secret's leaf does not parse")
	}
	return block.Bytes
}
