//go:build linux

package realnode_test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/certmanager/cmrun"
	"github.com/configstamp/configstamp/test/framework"
)

// TestREADMEInstallCertManager installs cert-manager (its CRDs from the
// module this repository requires; its issuing controllers and cainjector
// built from that module's packages, running in this process as
// test/certmanager runs them: cert-manager's images are not buildable here),
// then runs "With cert-manager (the default)" and "Opt a workload in and
// check it works" verbatim. configstamp's pods serve the certificate
// cert-manager issued from the Secret the kubelet mounts. A renewal of the
// serving certificate reaches the running pods through the kubelet's update
// of that volume, with no failed admission meanwhile.
func TestREADMEInstallCertManager(t *testing.T) {
	startCertManager(t)
	install(t, "### With cert-manager (the default)")
	checkExample(t)
	checkCertManagerRenewal(t)
	checkUninstall(t, "config/default")
}

// servingSecret and servingCertificate are config/certmanager's serving
// certificate and the Secret config/manager mounts.
const (
	servingCertificate = "configstamp-serving-cert"
	servingSecret      = "configstamp-webhook-server-cert"
)

// startCertManager applies cert-manager's CRDs and starts its controllers
// and cainjector until the test ends; their logs go to a file beside the
// control plane's.
func startCertManager(t *testing.T) {
	t.Helper()
	crds, err := cmrun.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	env.Kubectl(t, "", "apply", "--server-side", "-f", crds)
	if err := env.CP.WaitServed(t.Context(), "cert-manager.io/v1", "certificates", "issuers", "certificaterequests"); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(env.Dir(), "cert-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the controllers have stopped (cleanups run last first)
		klog.ClearLogger()
		_ = logFile.Close()
	})
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logFile), textlogger.Verbosity(2)))
	klog.SetLogger(log)
	ctrl.SetLogger(log) // cainjector logs through controller-runtime
	controllers, err := cmrun.StartControllers(t.Context(), cmrun.ControllerOptions{Kubeconfig: env.Kubeconfig, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	injector, err := cmrun.StartCAInjector(t.Context(), env.Config, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range []*cmrun.Running{injector, controllers} {
			if err := r.Stop(30 * time.Second); err != nil {
				t.Errorf("stopping cert-manager (log: %s): %v", logPath, err)
			}
		}
	})
}

// checkCertManagerRenewal has cert-manager reissue the serving certificate
// (as `cmctl renew` does) while CREATEs run, and waits until every manager
// pod serves the new one: cert-manager writes the Secret, the kubelet
// updates each pod's volume, configstamp's certificate watcher reloads it.
func checkCertManagerRenewal(t *testing.T) {
	t.Helper()
	ns := env.Namespace(t, "renewal", nil)
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"v": "0"}, nil))
	old := secretLeaf(t)
	pods := managerPods(t)
	for _, p := range pods {
		if leaf, err := servedLeaf(p.Status.PodIP); err != nil || !leaf.Equal(old) {
			t.Fatalf("manager %s does not serve the issued certificate (serial %x) before the renewal: %v", p.Name, old.SerialNumber, err)
		}
	}
	adm := startAdmissions(t, ns, "shared")
	if err := cmrun.Renew(t.Context(), cmclient.NewForConfigOrDie(env.Config), managerNamespace, servingCertificate); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	var renewed *x509.Certificate
	framework.Eventually(t, time.Minute, func() (bool, string) {
		renewed = secretLeaf(t)
		return !renewed.Equal(old), fmt.Sprintf("Secret %s still holds serial %x", servingSecret, old.SerialNumber)
	})
	issued := time.Since(began)
	// The kubelet updates a Secret volume at the pod's next sync (every
	// kubeletSync, with jitter), not at once.
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		var behind []string
		for _, p := range pods {
			leaf, err := servedLeaf(p.Status.PodIP)
			if err != nil || !leaf.Equal(renewed) {
				behind = append(behind, fmt.Sprintf("%s (%v)", p.Name, err))
			}
		}
		return len(behind) == 0, fmt.Sprintf("not serving serial %x yet: %s", renewed.SerialNumber, strings.Join(behind, ", "))
	})
	t.Logf("cert-manager reissued the serving certificate in %s; every manager pod served it %s after the renewal",
		issued.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
	adm.stop(t, "through the renewal")
	env.Kubectl(t, "", "delete", "namespace", ns, "--wait=false")
}

// secretLeaf is the certificate in the serving Secret's tls.crt.
func secretLeaf(t *testing.T) *x509.Certificate {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: managerNamespace, Name: servingSecret}, s); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		t.Fatalf("Secret %s has no PEM tls.crt", servingSecret)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
