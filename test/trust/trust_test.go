//go:build linux

// Package trust runs configstamp beside cert-manager's trust-manager, the
// trust-manager Go module's controller built from the module proxy
// (hack/trust-manager.sh), on the real node: a Bundle writes one CA bundle
// ConfigMap into every namespace it targets, as platforms distribute their
// CAs, and the containers that read it run. It runs in `make test-trust` (and
// CI), not in `make test`: building trust-manager is minutes of CPU, and make
// test's real-node lane holds the one real node a machine runs.
package trust

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/hack/images"
	"github.com/configstamp/configstamp/test/framework"
)

// trustModule is the trust-manager release the suite runs.
const trustModule = "github.com/cert-manager/trust-manager@v0.25.0"

// trustNamespace is trust-manager's --trust-namespace (its default).
const trustNamespace = "cert-manager"

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{
		Plane: framework.RealNode,
		// The kubelet rewrites a mounted ConfigMap at a pod's next resync.
		KubeletSyncFrequency: 10 * time.Second,
		// configstamp at its defaults (a 2 s debounce, the canary, a 30 s
		// verification window, a budget of 10).
		Prepare: func(ctx context.Context, e *framework.Env) (string, error) {
			return "", startTrustManager(ctx, e) // configstamp runs as admin here
		},
	}))
}

// startTrustManager installs the Bundle CRD of trustModule's chart and runs
// its controller (bin/'s, built by `make trust-manager`, or here when it is
// missing) with the admin kubeconfig. Its validating webhook serves on a
// loopback port with a certificate of its own, registered with no API server
// (Bundles here are valid).
func startTrustManager(ctx context.Context, e *framework.Env) error {
	began := time.Now()
	dir, err := framework.ModuleSource(ctx, trustModule)
	if err != nil {
		return err
	}
	crd, err := chartCRD(filepath.Join(dir, "deploy", "charts", "trust-manager", "templates", "crd-trust.cert-manager.io_bundles.yaml"), e.Dir())
	if err != nil {
		return err
	}
	if err := e.ApplyCRDs(ctx, "bundles.trust.cert-manager.io", "-f", crd); err != nil {
		return err
	}
	if _, stderr, err := e.KubectlErr("", "create", "namespace", trustNamespace); err != nil {
		return fmt.Errorf("creating %s: %w\n%s", trustNamespace, err, stderr)
	}
	tls := filepath.Join(e.Dir(), "trust-manager-tls")
	if err := servingCert(tls); err != nil {
		return err
	}
	bin, err := e.ControllerBinary(ctx, "trust-manager.sh", "trust-manager", strings.Split(trustModule, "@")[1])
	if err != nil {
		return err
	}
	log, err := e.StartController("trust-manager", bin, 3, func(ports []string) []string {
		return []string{"--leader-elect=false", "--trust-namespace=" + trustNamespace, "--readiness-probe-port=" + ports[0],
			"--metrics-port=" + ports[1], "--webhook-host=127.0.0.1", "--webhook-port=" + ports[2], "--webhook-certificate-dir=" + tls}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "trust: CRD and controller of %s up in %v (log %s)\n", trustModule, time.Since(began).Round(time.Millisecond), log)
	return nil
}

// chartCRD writes the CRD of a Helm template (the chart's crds.enabled and
// labels lines dropped) into dir, returning its path.
func chartCRD(template, dir string) (string, error) {
	b, err := os.ReadFile(template)
	if err != nil {
		return "", err
	}
	lines := strings.Split(string(b), "\n")
	var out []string
	for i, line := range lines {
		next := ""
		if i+1 < len(lines) {
			next = lines[i+1]
		}
		if strings.Contains(line, "{{") || strings.TrimSpace(line) == "labels:" && strings.Contains(next, "{{") {
			continue
		}
		out = append(out, line)
	}
	path := filepath.Join(dir, "trust-bundles-crd.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o600)
}

// servingCert writes a self-signed serving certificate for 127.0.0.1 into
// dir as tls.crt and tls.key.
func servingCert(dir string) error {
	crt, key, err := selfSigned("127.0.0.1")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600)
}

// selfSigned is a self-signed certificate, a CA, for name (as its common
// name, and its IP address when name is one), PEM-encoded, and its key.
func selfSigned(name string) (crt, key []byte, err error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// ca is a CA certificate of its own name, PEM-encoded.
func ca(t *testing.T, name string) string {
	t.Helper()
	crt, _, err := selfSigned(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(crt)
}

// bundle is the trust-manager Bundle name: the CAs given, inline, written
// into the ConfigMap name, key ca.crt, of every namespace in a ring.
func bundle(name string, cas ...string) string {
	var inline strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(strings.Join(cas, "")), "\n") {
		inline.WriteString("      " + line + "\n")
	}
	return fmt.Sprintf(`apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata: {name: %s}
spec:
  sources:
  - inLine: |
%s  target:
    configMap: {key: ca.crt}
    namespaceSelector:
      matchExpressions:
      - {key: %s, operator: Exists}
`, name, inline.String(), rollout.LabelRing)
}

// consumer is an opted-in Deployment of one replica of the test app reading
// the bundle's ConfigMap cm, mounted at /etc/trust, at start: it rejects a
// bundle holding the CA whose PEM contains distrusted (it exits), as a
// client that denies a revoked CA refuses to start with it.
func consumer(ns, name, cm, distrusted string) *appsv1.Deployment {
	ready := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}}
	spec := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Image: images.TestAppRef, ImagePullPolicy: corev1.PullNever,
			Env:            []corev1.EnvVar{{Name: "APP_DIRS", Value: "/etc/trust"}, {Name: "APP_REJECT", Value: distrusted}},
			VolumeMounts:   []corev1.VolumeMount{{Name: "trust", MountPath: "/etc/trust"}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: ready, PeriodSeconds: 1, FailureThreshold: 1, TimeoutSeconds: 5}}},
		Volumes: []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}},
		TerminationGracePeriodSeconds: ptr.To[int64](1),
	}
	d := framework.Deployment(ns, name, framework.OptIn, spec)
	d.Spec.Replicas = ptr.To[int32](1)
	return d
}

// pemLine is a line from the middle of a PEM's body: text no other
// certificate's PEM holds.
func pemLine(pemText string) string {
	lines := strings.Split(strings.TrimSpace(pemText), "\n")
	return lines[len(lines)/2][8:40]
}

// TestABadBundleCostsOnePod is issue 54's trust-manager run, at configstamp's
// defaults: a Bundle writes its CA bundle into three ringed namespaces (one
// of ring 0, two of ring 1), where two Deployments each read it at start.
// A `kubectl apply` of the Bundle adds a CA every consumer rejects (a revoked
// one): trust-manager writes it into all three namespaces, and exactly one
// pod in the cluster ran it, one workload was stamped, and every other
// workload is told the change is halted, past the halted workloads' recheck.
// The Bundle with a good new CA then rolls all six, ring 0 first, and ring 1
// with no canary of its own.
func TestABadBundleCostsOnePod(t *testing.T) {
	trusted, revoked, added := ca(t, "platform-root"), ca(t, "revoked-root"), ca(t, "new-root")
	distrusted := pemLine(revoked)
	if strings.Contains(trusted+added, distrusted) {
		t.Fatalf("%q is in the other CAs too", distrusted)
	}
	const name = "platform-cas"
	env.Kubectl(t, bundle(name, trusted), "apply", "-f", "-")
	var namespaces []string
	for i, ring := range []string{"0", "1", "1"} {
		namespaces = append(namespaces, env.Namespace(t, fmt.Sprintf("trust%s-%d", ring, i), map[string]string{rollout.LabelRing: ring}))
	}
	holds := func(ns, ca string) (bool, string) {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
			return false, err.Error()
		}
		return strings.Contains(cm.Data["ca.crt"], ca), fmt.Sprintf("%s/%s: %d bytes of ca.crt", ns, name, len(cm.Data["ca.crt"]))
	}
	var all []*appsv1.Deployment
	for _, ns := range namespaces {
		framework.Eventually(t, time.Minute, func() (bool, string) { return holds(ns, pemLine(trusted)) })
		for _, app := range []string{"a", "b"} {
			all = append(all, consumer(ns, app, name, distrusted))
		}
	}
	objs := make([]client.Object, len(all))
	for i, d := range all {
		objs[i] = d
	}
	env.Apply(t, objs...)
	before := map[string]string{}
	for _, d := range all {
		rolledOut(t, d, 5*time.Minute)
		before[d.Namespace+"/"+d.Name] = framework.TemplateHash(d)
	}

	// The revoked CA, through the Bundle.
	ran := map[string]bool{}
	look := func() (stamped []string) {
		for _, d := range all {
			for _, p := range env.LivePods(t, d.Namespace, map[string]string{"app": d.Name}) {
				if h := p.Annotations[stamp.AnnotationHash]; h != "" && h != before[d.Namespace+"/"+d.Name] {
					ran[p.Namespace+"/"+p.Name] = true
				}
			}
			if env.Get(t, d); framework.TemplateHash(d) != before[d.Namespace+"/"+d.Name] {
				stamped = append(stamped, d.Namespace+"/"+d.Name)
			}
		}
		return stamped
	}
	changed := time.Now()
	env.Kubectl(t, bundle(name, trusted, revoked), "apply", "-f", "-")
	for _, ns := range namespaces {
		framework.Eventually(t, time.Minute, func() (bool, string) { return holds(ns, distrusted) })
	}
	t.Logf("trust-manager wrote the revoked CA into %d namespaces within %s", len(namespaces), since(changed))
	var canary *appsv1.Deployment
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		stamped := look()
		if len(stamped) > 1 || len(stamped) == 1 && !strings.HasPrefix(stamped[0], namespaces[0]+"/") {
			t.Fatalf("%v stamped %s after the bad bundle: want one workload of ring 0 alone", stamped, since(changed))
		}
		for _, d := range all[:2] {
			if rec := rollout.Read(d.GetAnnotations()); rec.State == rollout.Failed {
				canary = d
				return true, ""
			}
		}
		return false, fmt.Sprintf("no failed canary in ring 0 yet; stamped %v; pods that ran the revoked CA %v", stamped, slices.Sorted(maps.Keys(ran)))
	})
	t.Logf("ring 0's canary %s failed %s after the change", canary.Name, since(changed))
	for _, d := range all {
		if d != canary {
			env.WaitEvent(t, d, rollout.ReasonRolloutHalted, "ConfigMap/"+name)
		}
	}
	// Past the halted workloads' recheck (30 s), the debounce and a window.
	watched := time.Now()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		if stamped := look(); len(stamped) > 1 || len(ran) > 1 {
			t.Fatalf("stamped %v, pods that ran the revoked CA %v: want ring 0's canary and its one pod", stamped, slices.Sorted(maps.Keys(ran)))
		}
		return time.Since(watched) > 65*time.Second, "watching the halt"
	})
	if len(ran) != 1 {
		t.Fatalf("%d pods ran the revoked CA (%v), want exactly one", len(ran), slices.Sorted(maps.Keys(ran)))
	}
	t.Logf("exactly one pod in the cluster ran the revoked CA (%v); the other 5 workloads in 3 namespaces were never stamped, all told it is halted", slices.Sorted(maps.Keys(ran)))

	// A good new CA, ring by ring.
	fixed := time.Now()
	env.Kubectl(t, bundle(name, trusted, added), "apply", "-f", "-")
	for _, d := range all {
		framework.Eventually(t, 6*time.Minute, func() (bool, string) {
			env.Get(t, d)
			rec := rollout.Read(d.GetAnnotations())
			return rec.State == rollout.Completed && !rec.Started.Before(fixed.Truncate(time.Second)), fmt.Sprintf("%s/%s: record %+v", d.Namespace, d.Name, rec)
		})
		if rec := rollout.Read(d.GetAnnotations()); d.Namespace != namespaces[0] && rec.Canary != rollout.NoCanary {
			t.Errorf("%s/%s of ring 1 had a canary of its own: %+v", d.Namespace, d.Name, rec)
		}
	}
	t.Logf("the Bundle with a new CA rolled 6 workloads in 3 namespaces in %s, ring by ring", since(fixed))
}

// rolledOut polls until d is rolled out (framework.RolledOut).
func rolledOut(t *testing.T, d *appsv1.Deployment, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, func() (bool, string) {
		env.Get(t, d)
		return framework.RolledOut(d), fmt.Sprintf("deployment %s/%s not rolled out: %+v", d.Namespace, d.Name, d.Status)
	})
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }
