// Command floormanager is the memory floor of `make bench`: a bare
// controller-runtime manager built from the libraries configstamp must use,
// doing the least any controller of the same objects does. It elects a leader,
// serves health probes and metrics, and caches the same objects configstamp
// watches (ConfigMaps, Secrets, Namespaces and the workload kinds), stripped
// to their names and resourceVersions: nothing configstamp reads, no
// indexes, no reconcilers, no webhook. Its resident memory after sync, next
// to configstamp's in the same run on the same objects, is what the required
// libraries cost before configstamp adds anything.
package main

import (
	"errors"
	"flag"
	"net/http"
	"os"
	"reflect"
	"runtime/debug"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	var namespace, probeAddr, metricsAddr string // --kubeconfig is controller-runtime's
	flag.StringVar(&namespace, "namespace", "configstamp-system", "namespace of the leader lease")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:0", "health probes")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "127.0.0.1:0", "metrics")
	flag.Parse()
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(50) // configstamp's default
	}
	zl, err := zap.NewProduction()
	if err != nil {
		os.Exit(1)
	}
	log := zapr.NewLogger(zl)
	ctrl.SetLogger(log)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "kubeconfig")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          true,
		LeaderElectionID:        "bench-floor-manager",
		LeaderElectionNamespace: namespace,
		Cache:                   cache.Options{DefaultTransform: namesOnly},
	})
	if err != nil {
		log.Error(err, "manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}, &corev1.Namespace{},
		&appsv1.Deployment{}, &appsv1.StatefulSet{}, &appsv1.DaemonSet{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			log.Error(err, "informer")
			os.Exit(1)
		}
	}
	_ = mgr.GetEventRecorder("bench-floor")
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("synced", func(*http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errNotSynced
		}
		return nil
	}); err != nil {
		os.Exit(1)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

// namesOnly keeps an object's name, namespace and resourceVersion: the least
// a cache of it holds (a new, empty object of the same type with those set).
func namesOnly(in any) (any, error) {
	obj, ok := in.(client.Object)
	if !ok {
		return in, nil
	}
	out, ok := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
	if !ok {
		return in, nil
	}
	out.SetName(obj.GetName())
	out.SetNamespace(obj.GetNamespace())
	out.SetResourceVersion(obj.GetResourceVersion())
	return out, nil
}

var errNotSynced = errors.New("caches not synced")
