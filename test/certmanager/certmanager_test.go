// Package certmanager runs configstamp's cert-manager path for real on a local
// control plane (etcd and kube-apiserver): cert-manager's CRDs from the module
// this repository requires, the Issuers, Certificates and
// MutatingWebhookConfiguration rendered from config/default (adapted for a
// webhook on 127.0.0.1 instead of a Service), cert-manager's own issuing
// controllers and cainjector running in the test process from the module's
// packages (test/certmanager/cmrun), the serving Secret published as files
// the way the kubelet publishes a Secret volume, and the configstamp binary in
// --cert-mode=cert-manager serving those files. The API server then calls
// configstamp's webhook over cert-manager's TLS: the stamp on a Deployment
// returned by Create is the proof, since the webhook's failurePolicy is Ignore
// and a TLS failure would admit the Deployment unstamped.
package certmanager

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apiutil "github.com/cert-manager/cert-manager/pkg/api/util"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/certmanager/cmrun"
	"github.com/configstamp/configstamp/test/framework"
)

var (
	env *framework.Env
	// workDir holds the cert dir, configstamp's log and cert-manager's log.
	workDir string
	// certDir is configstamp's --cert-dir: the "mounted" serving Secret.
	certDir string
	// cmLog receives the logs of cert-manager's controllers and cainjector.
	cmLog logr.Logger
)

const fieldManager = "configstamp-test"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if workDir, err = os.MkdirTemp("", "configstamp-certmanager-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	certDir = filepath.Join(workDir, "serving-certs")
	logFile, err := os.Create(filepath.Join(workDir, "cert-manager.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer logFile.Close()
	// cert-manager's controllers log to klog unless their context carries a
	// logger, client-go logs to klog, cainjector logs through controller-runtime:
	// all of it goes to the file, not into the test output.
	cmLog = textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logFile), textlogger.Verbosity(2)))
	klog.SetLogger(cmLog)
	ctrl.SetLogger(cmLog)

	code := framework.Main(m, &env, framework.Config{NoConfigstamp: true})
	if code != 0 {
		fmt.Fprintf(os.Stderr, "certmanager: cert-manager's log and configstamp's log kept in %s\n", workDir)
	} else if os.Getenv("CONFIGSTAMP_KEEP_TEST_DIR") == "" {
		_ = os.RemoveAll(workDir)
	}
	return code
}

// TestWithoutFilesNeverReady: before the serving Secret's files exist,
// configstamp in cert-manager mode never reports ready. controller-runtime's
// webhook server loads the pair when it starts, so configstamp exits instead of
// waiting; in a cluster the kubelet does not start the container before it can
// mount the Secret, so this only matters out of cluster.
func TestWithoutFilesNeverReady(t *testing.T) {
	empty := t.TempDir()
	ports := freePorts(t, 2)
	probe := "127.0.0.1:" + strconv.Itoa(ports[1])
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, env.Binary, "--kubeconfig="+env.Kubeconfig, "--namespace="+framework.OwnNamespace,
		"--cert-mode=cert-manager", "--cert-dir="+empty, "--webhook-host=127.0.0.1", "--webhook-port="+strconv.Itoa(ports[0]),
		"--health-probe-bind-address="+probe, "--metrics-bind-address=0", "--leader-elect=false", "--log-format=console")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	answered := 0
	for {
		select {
		case err := <-exited:
			if ctx.Err() != nil {
				t.Fatalf("configstamp still running after %v without certificate files", 90*time.Second)
			}
			if err == nil {
				t.Fatalf("configstamp exited 0 without certificate files:\n%s", out.String())
			}
			if !strings.Contains(out.String(), filepath.Join(empty, "tls.crt")) {
				t.Errorf("configstamp's error does not name the missing %s:\n%s", filepath.Join(empty, "tls.crt"), out.String())
			}
			t.Logf("without files: /readyz answered %d times, never 200; configstamp exited (%v): %s", answered, err, lastLine(out.String()))
			return
		case <-time.After(50 * time.Millisecond):
		}
		if code, body, err := get(probe, "/readyz"); err == nil {
			answered++
			if code == http.StatusOK {
				t.Fatalf("/readyz is 200 without certificate files: %s", body)
			}
		}
	}
}

// TestCertManagerServesTheWebhook is one story in steps; a failed step stops it.
func TestCertManagerServesTheWebhook(t *testing.T) {
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	cm := cmclient.NewForConfigOrDie(env.Config)
	ns := framework.OwnNamespace
	r := render(t)
	timings := map[string]time.Duration{}
	t.Cleanup(func() {
		for _, k := range []string{"certificates ready", "files → ready", "files → served", "certificates ready → caBundle seen",
			"renewal → files published", "renewal files → served", "CA rotation → bundle, files, served"} {
			if d, ok := timings[k]; ok {
				t.Logf("timing: %-38s %v", k, d.Round(time.Millisecond))
			}
		}
	})
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("install CRDs, Namespace, Issuers, Certificates", func(t *testing.T) {
		crds, err := cmrun.CRDDir()
		if err != nil {
			t.Fatal(err)
		}
		env.Kubectl(t, "", "apply", "--server-side", "--field-manager="+fieldManager, "-f", crds)
		if err := env.CP.WaitServed(t.Context(), "cert-manager.io/v1", "certificates", "issuers", "certificaterequests"); err != nil {
			t.Fatal(err)
		}
		objs := []client.Object{r.namespace}
		for _, o := range r.issuers {
			objs = append(objs, o)
		}
		objs = append(objs, r.caCert, r.servingCert)
		out2, _ := env.Kubectl(t, framework.Manifest(t, objs...), "apply", "--server-side", "--field-manager="+fieldManager, "-f", "-")
		t.Logf("applied:\n%s", out2)
	})

	var cstamp *framework.Process
	step("configstamp is not ready while its files hold an expired certificate", func(t *testing.T) {
		if err := cmrun.WriteAtomic(certDir, expiredPair(t)); err != nil {
			t.Fatal(err)
		}
		var err error
		cstamp, err = env.StartConfigstamp(t.Context(), filepath.Join(workDir, "configstamp.log"),
			"--cert-mode=cert-manager", "--cert-dir="+certDir, "--webhook-config-name="+r.mwc.GetName(), "--log-format=console")
		env.Configstamp = cstamp // stopped, and its log dumped on failure, by framework.Main
		if err != nil {
			t.Fatal(err)
		}
		// Once every other check passes, the certificate check alone keeps it unready.
		framework.Eventually(t, 60*time.Second, func() (bool, string) {
			for _, check := range []string{"webhook", "caches"} {
				if code, body, err := get(cstamp.ProbeAddr, "/readyz/"+check); err != nil || code != http.StatusOK {
					return false, fmt.Sprintf("/readyz/%s: %d %s %v", check, code, body, err)
				}
			}
			return true, ""
		})
		code, body, err := get(cstamp.ProbeAddr, "/readyz/certificate")
		if err != nil || code == http.StatusOK || !strings.Contains(body, "not now") {
			t.Fatalf("/readyz/certificate with an expired certificate: %d %q %v", code, body, err)
		}
		if code, body, _ := get(cstamp.ProbeAddr, "/readyz?verbose"); code == http.StatusOK {
			t.Fatalf("/readyz is 200 with an expired certificate:\n%s", body)
		}
		t.Logf("/readyz/certificate: %d %s", code, strings.TrimSpace(body))
	})

	wl := env.Namespace(t, "certmanager", nil)
	if err := env.Client.Create(ctx, framework.ConfigMap(wl, "app-config", map[string]string{"greeting": "hello"}, nil)); err != nil {
		t.Fatal(err)
	}
	step("without cert-manager's CA bundle the API server fails open: unstamped", func(t *testing.T) {
		// The MutatingWebhookConfiguration as rendered, pointed at configstamp's
		// port; cert-manager is not running yet, so it has no caBundle.
		env.Kubectl(t, framework.Manifest(t, adaptWebhookConfiguration(t, r.mwc, cstamp.WebhookPort)),
			"apply", "--server-side", "--field-manager="+fieldManager, "-f", "-")
		// Wait until the API server uses the configuration: a dry run fails open.
		before := webhookCalls(t)
		framework.Eventually(t, 60*time.Second, func() (bool, string) {
			d := deployment(wl, "dry-run")
			if err := env.Client.Create(t.Context(), d, client.DryRunAll); err != nil {
				return false, err.Error()
			}
			now := webhookCalls(t)
			return now.failedOpen > before.failedOpen, fmt.Sprintf("webhook calls %+v", now)
		})
		before = webhookCalls(t)
		d := deployment(wl, "before-cert-manager")
		if err := env.Client.Create(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		after := webhookCalls(t)
		// (More than one more fail-open is possible: configstamp's reconciler may
		// already be recording its baseline on this Deployment, an UPDATE.)
		if h := framework.TemplateHash(d); h != "" || after.failedOpen <= before.failedOpen {
			t.Fatalf("CREATE without a trusted certificate: stamp %q, webhook calls %+v → %+v; want no stamp and a fail-open", h, before, after)
		}
		t.Logf("Deployment %s/%s admitted unstamped: the API server could not verify configstamp's certificate and failed open", wl, d.Name)
	})

	var controllers, injector *cmrun.Running
	var certsReady time.Time
	t.Cleanup(func() {
		for _, r := range []*cmrun.Running{injector, controllers} {
			if r != nil {
				if err := r.Stop(30 * time.Second); err != nil {
					t.Errorf("stopping cert-manager: %v", err)
				}
			}
		}
	})
	step("cert-manager's controllers issue the CA and the serving certificate", func(t *testing.T) {
		began := time.Now()
		var err error
		controllers, err = cmrun.StartControllers(ctx, cmrun.ControllerOptions{Kubeconfig: env.Kubeconfig, Namespace: ns, Log: cmLog})
		if err != nil {
			t.Fatal(err)
		}
		if injector, err = cmrun.StartCAInjector(ctx, env.Config, cmLog); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{r.caCert.GetName(), r.servingCert.GetName()} {
			waitCertificate(t, cm, ns, name, 1)
		}
		certsReady = time.Now()
		timings["certificates ready"] = certsReady.Sub(began)
		ca := secretCert(t, cs, ns, r.caSecret, "tls.crt")
		leaf := secretCert(t, cs, ns, r.servingSecret, "tls.crt")
		if !ca.IsCA || leaf.Issuer.String() != ca.Subject.String() || !leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
			t.Fatalf("unexpected chain: CA %s (isCA %v), leaf issued by %s for %v %v", ca.Subject, ca.IsCA, leaf.Issuer, leaf.DNSNames, leaf.IPAddresses)
		}
		t.Logf("issued in %v: CA %q serial %x, serving certificate for %v %v serial %x",
			timings["certificates ready"].Round(time.Millisecond), ca.Subject.CommonName, ca.SerialNumber, leaf.DNSNames, leaf.IPAddresses, leaf.SerialNumber)
	})

	var vol *cmrun.SecretVolume
	step("the serving Secret's files make configstamp ready and are served", func(t *testing.T) {
		var err error
		if vol, err = cmrun.MountSecret(ctx, cs, ns, r.servingSecret, certDir, cmLog); err != nil {
			t.Fatal(err)
		}
		want := secretCert(t, cs, ns, r.servingSecret, "tls.crt")
		written := waitWritten(t, vol, want)
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			code, body, err := get(cstamp.ProbeAddr, "/readyz?verbose")
			return err == nil && code == http.StatusOK, fmt.Sprintf("/readyz: %d %s %v", code, body, err)
		})
		timings["files → ready"] = time.Since(written)
		waitServed(t, cstamp, want, nil)
		timings["files → served"] = time.Since(written)
	})

	step("cainjector injects the CA bundle into configstamp's MutatingWebhookConfiguration", func(t *testing.T) {
		ca := secretCert(t, cs, ns, r.servingSecret, "ca.crt")
		waitBundle(t, r.mwc.GetName(), ca)
		timings["certificates ready → caBundle seen"] = time.Since(certsReady)
		if got := bundle(t, r.mwc.GetName()); !bytes.Equal(got, pemCert(ca)) {
			t.Fatalf("injected bundle %q, want exactly the CA %q", got, pemCert(ca))
		}
	})

	step("the API server calls the webhook over cert-manager's TLS: stamped at CREATE", func(t *testing.T) {
		waitServed(t, cstamp, secretCert(t, cs, ns, r.servingSecret, "tls.crt"), bundle(t, r.mwc.GetName()))
		// The API server applies a changed MutatingWebhookConfiguration (here:
		// the injected caBundle) a moment after it is stored: wait for a dry
		// run to be stamped, then the real CREATE must be.
		waitDryRunStamped(t, wl)
		createStamped(t, wl, "app-1")
	})

	step("a renewed serving certificate is reloaded and served; stamped at CREATE", func(t *testing.T) {
		old := secretCert(t, cs, ns, r.servingSecret, "tls.crt")
		oldBundle := bundle(t, r.mwc.GetName())
		began := time.Now()
		renew(t, cm, ns, r.servingCert.GetName())
		renewed := waitSecretCertChanged(t, cs, ns, r.servingSecret, old)
		written := waitWritten(t, vol, renewed)
		timings["renewal → files published"] = written.Sub(began)
		waitServed(t, cstamp, renewed, oldBundle)
		timings["renewal files → served"] = time.Since(written)
		waitCertificate(t, cm, ns, r.servingCert.GetName(), 2)
		if !bytes.Equal(bundle(t, r.mwc.GetName()), oldBundle) {
			t.Errorf("the CA bundle changed although only the serving certificate was renewed")
		}
		t.Logf("serial %x → %x (same CA); reloaded %v after the files changed",
			old.SerialNumber, renewed.SerialNumber, timings["renewal files → served"].Round(time.Millisecond))
		// The API server may reuse its connection from before the renewal; the
		// next step forces a new handshake.
		createStamped(t, wl, "app-2")
	})

	step("a rotated CA and reissued serving certificate: new bundle, new handshake, stamped at CREATE", func(t *testing.T) {
		oldCA := secretCert(t, cs, ns, r.caSecret, "tls.crt")
		oldLeaf := secretCert(t, cs, ns, r.servingSecret, "tls.crt")
		began := time.Now()
		renew(t, cm, ns, r.caCert.GetName())
		newCA := waitSecretCertChanged(t, cs, ns, r.caSecret, oldCA)
		waitCertificate(t, cm, ns, r.caCert.GetName(), 2)
		// cert-manager does not reissue certificates when their CA changes: the
		// serving certificate (and with it the injected bundle) follows at its
		// next renewal, here a manual one.
		renew(t, cm, ns, r.servingCert.GetName())
		leaf := waitSecretCertChanged(t, cs, ns, r.servingSecret, oldLeaf)
		if leaf.CheckSignatureFrom(newCA) != nil {
			t.Fatalf("the reissued serving certificate is not signed by the new CA")
		}
		waitWritten(t, vol, leaf)
		// cainjector merges (feature CAInjectorMerging, GA and on by default in
		// cert-manager 1.21): the new CA joins the bundle and the old one stays
		// until it expires, so leaves of either CA verify during the rotation.
		waitBundle(t, r.mwc.GetName(), oldCA, newCA)
		waitServed(t, cstamp, leaf, pemCert(newCA))
		timings["CA rotation → bundle, files, served"] = time.Since(began)
		// The API server builds a new client (new TLS configuration) for the
		// changed bundle: this admission is a new handshake, with the new leaf.
		waitDryRunStamped(t, wl)
		createStamped(t, wl, "app-3")
		waitCertificate(t, cm, ns, r.servingCert.GetName(), 3)
	})

	step("configstamp left the MutatingWebhookConfiguration to cert-manager", func(t *testing.T) {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: r.mwc.GetName()}, mwc); err != nil {
			t.Fatal(err)
		}
		var managers []string
		for _, mf := range mwc.ManagedFields {
			managers = append(managers, mf.Manager+"/"+string(mf.Operation))
			if strings.HasPrefix(mf.Manager, "configstamp") && mf.Manager != fieldManager {
				t.Errorf("configstamp wrote the MutatingWebhookConfiguration (manager %s)", mf.Manager)
			}
		}
		if got, want := mwc.Annotations["cert-manager.io/inject-ca-from"], r.mwc.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != want {
			t.Errorf("annotation cert-manager.io/inject-ca-from = %q, want %q", got, want)
		}
		for _, w := range mwc.Webhooks {
			if w.ClientConfig.URL == nil || w.ClientConfig.Service != nil {
				t.Errorf("webhook %s: clientConfig %+v, want the test's URL", w.Name, w.ClientConfig)
			}
		}
		t.Logf("field managers: %v", managers)
		for name, r := range map[string]*cmrun.Running{"controllers": controllers, "cainjector": injector} {
			if err := r.Err(); err != nil {
				t.Errorf("cert-manager %s: %v", name, err)
			}
		}
		writes, err := vol.Writes()
		if err != nil {
			t.Error(err)
		}
		t.Logf("the serving Secret was published %d times", len(writes))
	})
}

// rendered holds the objects of `kubectl kustomize config/default` the test uses.
type rendered struct {
	namespace               *unstructured.Unstructured
	issuers                 []*unstructured.Unstructured
	caCert, servingCert     *unstructured.Unstructured
	caSecret, servingSecret string
	mwc                     *unstructured.Unstructured
}

func render(t *testing.T) *rendered {
	t.Helper()
	out, _ := env.Kubectl(t, "", "kustomize", filepath.Join(env.Root, "config", "default"))
	r := &rendered{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding the render: %v", err)
		}
		switch u.GetKind() {
		case "Namespace":
			r.namespace = u
		case "Issuer":
			r.issuers = append(r.issuers, u)
		case "Certificate":
			isCA, _, _ := unstructured.NestedBool(u.Object, "spec", "isCA")
			secret, _, _ := unstructured.NestedString(u.Object, "spec", "secretName")
			if isCA {
				r.caCert, r.caSecret = u, secret
			} else {
				r.servingCert, r.servingSecret = u, secret
			}
		case "MutatingWebhookConfiguration":
			r.mwc = u
		}
	}
	if r.namespace == nil || r.namespace.GetName() != framework.OwnNamespace || len(r.issuers) != 2 ||
		r.caCert == nil || r.servingCert == nil || r.mwc == nil {
		t.Fatalf("config/default does not render the expected Namespace %s, 2 Issuers, a CA and a serving Certificate, a MutatingWebhookConfiguration:\n%s",
			framework.OwnNamespace, out)
	}
	if want := framework.OwnNamespace + "/" + r.servingCert.GetName(); r.mwc.GetAnnotations()["cert-manager.io/inject-ca-from"] != want {
		t.Fatalf("MutatingWebhookConfiguration annotation cert-manager.io/inject-ca-from = %q, want %q",
			r.mwc.GetAnnotations()["cert-manager.io/inject-ca-from"], want)
	}
	// Out of cluster the API server calls the webhook at https://127.0.0.1:PORT:
	// the serving certificate must name that address too.
	if err := unstructured.SetNestedStringSlice(r.servingCert.Object, []string{"127.0.0.1"}, "spec", "ipAddresses"); err != nil {
		t.Fatal(err)
	}
	return r
}

// adaptWebhookConfiguration points every webhook at https://127.0.0.1:port
// (same path) instead of the Service; annotations (inject-ca-from) stay, and
// there is no caBundle for cainjector to find.
func adaptWebhookConfiguration(t *testing.T, in *unstructured.Unstructured, port int) *unstructured.Unstructured {
	t.Helper()
	mwc := in.DeepCopy()
	hooks, _, _ := unstructured.NestedSlice(mwc.Object, "webhooks")
	for i := range hooks {
		h := hooks[i].(map[string]any)
		path, _, _ := unstructured.NestedString(h, "clientConfig", "service", "path")
		if _, has, _ := unstructured.NestedFieldNoCopy(h, "clientConfig", "caBundle"); has || path == "" {
			t.Fatalf("rendered webhook %v: want a service clientConfig with a path and no caBundle", h["name"])
		}
		h["clientConfig"] = map[string]any{"url": fmt.Sprintf("https://127.0.0.1:%d%s", port, path)}
	}
	if err := unstructured.SetNestedSlice(mwc.Object, hooks, "webhooks"); err != nil {
		t.Fatal(err)
	}
	return mwc
}

// expiredPair is a matching key pair for 127.0.0.1 whose certificate expired
// an hour ago, as tls.crt/tls.key.
func expiredPair(t *testing.T) map[string][]byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "expired"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// waitCertificate waits until the Certificate is Ready for its generation at
// the given revision.
func waitCertificate(t *testing.T, cm cmclient.Interface, ns, name string, revision int) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		crt, err := cm.CertmanagerV1().Certificates(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := apiutil.CertificateHasConditionWithObservedGeneration(crt, cmapi.CertificateCondition{
			Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue, ObservedGeneration: crt.Generation})
		rev := 0
		if crt.Status.Revision != nil {
			rev = *crt.Status.Revision
		}
		return ready && rev == revision, fmt.Sprintf("Certificate %s revision %d (want %d), conditions %+v", name, rev, revision, crt.Status.Conditions)
	})
}

// renew triggers a reissuance the way `cmctl renew` does.
func renew(t *testing.T, cm cmclient.Interface, ns, name string) {
	t.Helper()
	if err := cmrun.Renew(t.Context(), cm, ns, name); err != nil {
		t.Fatal(err)
	}
}

func secretData(t *testing.T, cs kubernetes.Interface, ns, name string) map[string][]byte {
	t.Helper()
	s, err := cs.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Data
}

func secretCert(t *testing.T, cs kubernetes.Interface, ns, name, key string) *x509.Certificate {
	t.Helper()
	c, err := parseCert(secretData(t, cs, ns, name)[key])
	if err != nil {
		t.Fatalf("Secret %s/%s %s: %v", ns, name, key, err)
	}
	return c
}

func parseCert(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificate(block.Bytes)
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// waitSecretCertChanged waits until the certificate in the Secret's tls.crt is
// no longer old, and returns it.
func waitSecretCertChanged(t *testing.T, cs kubernetes.Interface, ns, name string, old *x509.Certificate) *x509.Certificate {
	t.Helper()
	var got *x509.Certificate
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		s, err := cs.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if got, err = parseCert(s.Data["tls.crt"]); err != nil {
			return false, err.Error()
		}
		return !got.Equal(old), fmt.Sprintf("Secret %s still holds serial %x", name, old.SerialNumber)
	})
	return got
}

// waitWritten waits until the volume has published want as tls.crt and
// returns when it did.
func waitWritten(t *testing.T, vol *cmrun.SecretVolume, want *x509.Certificate) time.Time {
	t.Helper()
	var at time.Time
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		writes, err := vol.Writes()
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range writes {
			if c, err := parseCert(w.Data["tls.crt"]); err == nil && c.Equal(want) {
				at = w.At
				return true, ""
			}
		}
		return false, fmt.Sprintf("serial %x not published yet (%d publications)", want.SerialNumber, len(writes))
	})
	onDisk, err := os.ReadFile(filepath.Join(vol.Dir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := parseCert(onDisk); err != nil || !c.Equal(want) {
		t.Fatalf("%s does not hold serial %x (%v)", filepath.Join(vol.Dir, "tls.crt"), want.SerialNumber, err)
	}
	return at
}

// waitServed waits until configstamp's webhook port serves want. With roots
// the handshake also verifies the chain for 127.0.0.1, as the API server does
// with the caBundle.
func waitServed(t *testing.T, p *framework.Process, want *x509.Certificate, roots []byte) {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true}
	if roots != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(roots) {
			t.Fatalf("no certificate in the bundle %q", roots)
		}
		cfg = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.WebhookPort))
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return false, fmt.Sprintf("TLS handshake with %s: %v", addr, err)
		}
		defer func() { _ = conn.Close() }()
		got := conn.ConnectionState().PeerCertificates[0]
		return got.Equal(want), fmt.Sprintf("%s serves serial %x, want %x", addr, got.SerialNumber, want.SerialNumber)
	})
}

// bundle returns the caBundle of the MutatingWebhookConfiguration's webhooks
// (failing unless they all carry the same one).
func bundle(t *testing.T, name string) []byte {
	t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, mwc); err != nil {
		t.Fatal(err)
	}
	for _, w := range mwc.Webhooks[1:] {
		if !bytes.Equal(w.ClientConfig.CABundle, mwc.Webhooks[0].ClientConfig.CABundle) {
			t.Fatalf("webhooks %s and %s carry different caBundles", mwc.Webhooks[0].Name, w.Name)
		}
	}
	return mwc.Webhooks[0].ClientConfig.CABundle
}

// waitBundle waits until the caBundle of every webhook of the configuration
// holds exactly the CAs want (in any order).
func waitBundle(t *testing.T, name string, want ...*x509.Certificate) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, mwc); err != nil {
			return false, err.Error()
		}
		for _, w := range mwc.Webhooks {
			have := parseCerts(w.ClientConfig.CABundle)
			if len(have) != len(want) {
				return false, fmt.Sprintf("webhook %s caBundle holds %d certificates, want %d", w.Name, len(have), len(want))
			}
			for _, c := range want {
				if !slices.ContainsFunc(have, c.Equal) {
					return false, fmt.Sprintf("webhook %s caBundle lacks the CA serial %x", w.Name, c.SerialNumber)
				}
			}
		}
		return true, ""
	})
}

func parseCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		if block, data = pem.Decode(data); block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func deployment(ns, name string) *appsv1.Deployment {
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")
	return framework.Deployment(ns, name, framework.OptIn, spec)
}

// waitDryRunStamped waits until a dry-run CREATE of an opted-in Deployment
// comes back stamped: the API server calls the webhook with the current
// configuration and the handshake succeeds.
func waitDryRunStamped(t *testing.T, ns string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		d := deployment(ns, "dry-run")
		if err := env.Client.Create(t.Context(), d, client.DryRunAll); err != nil {
			return false, err.Error()
		}
		return framework.TemplateHash(d) != "", fmt.Sprintf("a dry-run CREATE came back without a stamp; webhook calls %+v", webhookCalls(t))
	})
}

// createStamped creates an opted-in Deployment with the admin client and fails
// unless the object returned by Create carries the template stamp.
func createStamped(t *testing.T, ns, name string) {
	t.Helper()
	d := deployment(ns, name)
	before := webhookCalls(t)
	if err := env.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	after := webhookCalls(t)
	h := d.Spec.Template.Annotations[stamp.AnnotationHash]
	if !strings.HasPrefix(h, "v1-") {
		t.Fatalf("Deployment %s/%s created without the stamp: template annotations %v; webhook calls %+v → %+v",
			ns, name, d.Spec.Template.Annotations, before, after)
	}
	if after.succeeded <= before.succeeded || after.failedOpen != before.failedOpen {
		t.Fatalf("API server's webhook calls %+v → %+v: want one more success, no fail-open", before, after)
	}
	t.Logf("Deployment %s/%s stamped at CREATE: %s=%s", ns, name, stamp.AnnotationHash, h)
}

// calls are the API server's counts of its calls to configstamp's webhooks
// (apiserver_admission_webhook_request_total with code 200 and
// apiserver_admission_webhook_fail_open_count, every configstamp.io webhook).
type calls struct{ succeeded, failedOpen float64 }

func webhookCalls(t *testing.T) calls {
	t.Helper()
	raw, err := kubernetes.NewForConfigOrDie(env.Config).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("reading kube-apiserver's metrics: %v", err)
	}
	var c calls
	for _, line := range strings.Split(string(raw), "\n") {
		var v *float64
		switch {
		case strings.HasPrefix(line, "apiserver_admission_webhook_request_total{") && strings.Contains(line, `code="200"`):
			v = &c.succeeded
		case strings.HasPrefix(line, "apiserver_admission_webhook_fail_open_count{"):
			v = &c.failedOpen
		default:
			continue
		}
		if !strings.Contains(line, `.configstamp.io"`) {
			continue
		}
		fields := strings.Fields(line)
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("parsing %q: %v", line, err)
		}
		*v += n
	}
	return c
}

func get(addr, path string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
