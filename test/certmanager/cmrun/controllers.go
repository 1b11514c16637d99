// Package cmrun runs cert-manager for real in a test process, against any API
// server reachable through a kubeconfig: the issuing controllers of the
// cert-manager controller binary and the CA injector, both constructed from the
// packages of the github.com/cert-manager/cert-manager module exactly as its
// cmd/controller and cmd/cainjector wire them (those two are separate modules,
// so their few lines of wiring are repeated here). It also plays the kubelet's
// part for a Secret volume (SecretVolume), so a process running out of cluster
// sees the files a pod would see.
//
// Only what a selfSigned/CA issuer chain needs runs: no ACME, Vault, Venafi,
// ingress-shim or gateway-shim controllers, and no cert-manager webhook (the
// CRDs' OpenAPI schemas still validate; cert-manager's own admission checks and
// defaulting do not run).
package cmrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"         // the issuers controller's ca issuer type
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned" // the issuers controller's selfSigned issuer type
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// IssuingControllers are the cert-manager controllers (their names in
// controllerpkg.Known(), as in the controller binary's --controllers flag)
// that take Issuers of kind selfSigned and ca and Certificates issued by them
// from creation to a Ready Secret, and renew them. Each package imported above
// registers its constructor in an init function, as pkg/issuer/ca and
// pkg/issuer/selfsigned register their issuer types.
var IssuingControllers = []string{
	issuers.ControllerName,
	trigger.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	issuing.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
	approver.ControllerName,
	crselfsigned.CRControllerName,
	crca.CRControllerName,
}

// Running is a set of goroutines started by StartControllers or StartCAInjector.
type Running struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func (r *Running) goRun(name string, fn func() error) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := fn(); err != nil && !errors.Is(err, context.Canceled) {
			r.mu.Lock()
			r.errs = append(r.errs, fmt.Errorf("%s: %w", name, err))
			r.mu.Unlock()
		}
	}()
}

// Err returns the errors the components have returned so far (a component
// that returns before Stop is a failure).
func (r *Running) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.errs...)
}

// Stop cancels the components and waits up to timeout for them to return.
func (r *Running) Stop(timeout time.Duration) error {
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return r.Err()
	case <-time.After(timeout):
		return errors.Join(r.Err(), fmt.Errorf("cert-manager components still running %v after stop", timeout))
	}
}

// ControllerOptions configure StartControllers.
type ControllerOptions struct {
	// Kubeconfig is the path of a kubeconfig (cert-manager's --kubeconfig).
	Kubeconfig string
	// Namespace limits the controllers to one namespace (--namespace); "" is all.
	Namespace string
	// Controllers to run. Default: IssuingControllers.
	Controllers []string
	// Workers per controller (--concurrent-workers). Default 5, as cert-manager.
	Workers int
	// Log receives the controllers' logs.
	Log logr.Logger
}

// StartControllers runs cert-manager's controllers in this process the way
// cert-manager's controller binary does without leader election
// (cmd/controller/app.Run): a controller.ContextFactory from the kubeconfig, each
// controller built by its registered constructor and Run, then the context's
// shared informer factories started. It returns once they run; the informers
// sync in the background.
func StartControllers(parent context.Context, o ControllerOptions) (*Running, error) {
	names := o.Controllers
	if len(names) == 0 {
		names = IssuingControllers
	}
	workers := o.Workers
	if workers == 0 {
		workers = 5
	}
	ctx, cancel := context.WithCancel(logf.NewContext(parent, o.Log, "cert-manager-controller"))
	r := &Running{cancel: cancel}

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig: o.Kubeconfig,
		Namespace:  o.Namespace,
		// cert-manager's defaults (internal/apis/config/controller/v1alpha1).
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: "kube-system"},
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("building cert-manager's controller context: %w", err)
	}
	// The base context: its informer factories are the ones every controller's
	// context shares.
	base, err := factory.Build()
	if err != nil {
		cancel()
		return nil, err
	}
	known := controllerpkg.Known()
	for _, name := range names {
		construct, ok := known[name]
		if !ok {
			cancel()
			return nil, fmt.Errorf("cert-manager controller %q is not registered", name)
		}
		iface, err := construct(factory)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("constructing cert-manager controller %q: %w", name, err)
		}
		r.goRun(name, func() error { return iface.Run(workers, ctx) })
	}
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	r.goRun("informers", func() error {
		<-ctx.Done()
		base.HTTP01ResourceMetadataInformersFactory.Shutdown()
		base.KubeSharedInformerFactory.Shutdown()
		base.SharedInformerFactory.Shutdown()
		return nil
	})
	return r, nil
}

// StartCAInjector runs cert-manager's cainjector in this process the way its
// binary does with default options and without leader election
// (cmd/cainjector/app.Run): a controller-runtime manager whose client never
// caches Secrets, with cainjector.RegisterAllInjectors for all four kinds of
// injectable and the Certificate data source enabled. The Certificate CRD must
// be installed.
func StartCAInjector(parent context.Context, cfg *rest.Config, log logr.Logger) (*Running, error) {
	cfg = util.RestConfigWithUserAgent(rest.CopyConfig(cfg), "cainjector")
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))

	ctx, cancel := context.WithCancel(logf.NewContext(parent, log, "cainjector"))
	r := &Running{cancel: cancel}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 log.WithName("cainjector"),
		Cache:                  cache.Options{ReaderFailOnMissingInformer: true},
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("creating the cainjector manager: %w", err)
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("registering cainjector's injectors: %w", err)
	}
	r.goRun("cainjector", func() error { return mgr.Start(ctx) })
	return r, nil
}
