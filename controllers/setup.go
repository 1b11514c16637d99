package controllers

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/fence"
	"github.com/configstamp/configstamp/controllers/hashkey"
	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Options configure the reconcilers.
type Options struct {
	// Kinds are the workload kinds to reconcile, built once at start.
	Kinds *workload.Registry
	// Policy spreads rollouts (see rollout.Policy).
	Policy rollout.Policy
	// Keys is the installation key, shared with the webhook.
	Keys *stamp.Keyring
	// KeySecret is the Secret holding the key, which every replica follows
	// (hashkey.Watcher).
	KeySecret hashkey.Secret
	// MaxConcurrentReconciles bounds parallel reconciles per kind: the one
	// workload controller runs up to this many times the number of kinds.
	MaxConcurrentReconciles int
	// Scope is the installation's, the webhook's too: workloads in other
	// namespaces are neither stamped nor rolled (the cache, CacheOptions, holds
	// only its namespaces; the reconciler also checks the namespace's labels).
	Scope *workload.Scope
	// Lease, with leader election, fences the leader's writes (records,
	// stamps): none once its lease may be another replica's.
	Lease *fence.Lease
	// Pin (--pin) hands the snapshots of pinned workloads over to their
	// revisions (RevisionOwner).
	Pin bool
	// Rings selects the namespaces whose rollout.LabelRing puts them in a
	// ring (--ring-namespace-selector; nil: every namespace).
	Rings labels.Selector
}

// Setup adds the one workload controller of every kind, with its Scheduler
// and its Wakes, and the hash key's Watcher, to mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if err := o.Policy.Validate(); err != nil {
		return err
	}
	rollout.RegisterMetrics(o.Kinds)
	// One resolver over the cache for the reconcilers, the takeover and the
	// halt lookups (it reads sequentially: no read budget to share).
	resolver := &workload.Resolver{Sources: mgr.GetClient(), Index: mgr.GetCache(), Keys: o.Keys}
	scheduler := newScheduler(mgr, o, resolver)
	wakes := NewWakes()
	// The leader's writers: fenced by its lease when there is one.
	writer := mgr.GetClient()
	if o.Lease != nil {
		writer = fence.Client(writer, o.Lease)
	}
	adopter := &Adopter{Client: writer, Reader: mgr.GetAPIReader(), Scope: o.Scope,
		Resolver:  resolver,
		KeySecret: o.KeySecret, Kinds: o.Kinds, Done: make(chan struct{}), Log: mgr.GetLogger().WithName("records")}
	if err := mgr.Add(adopter); err != nil {
		return fmt.Errorf("while adding the record takeover: %w", err)
	}
	r := &WorkloadReconciler{
		Client: writer, APIReader: mgr.GetAPIReader(), Kinds: o.Kinds,
		Resolver:                resolver,
		Recorder:                rollout.CountWarnings(mgr.GetEventRecorder("configstamp")),
		Scheduler:               scheduler,
		Wakes:                   wakes,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles * len(o.Kinds.All()),
		Scope:                   o.Scope,
		Pin:                     o.Pin,
		Adopted:                 adopter.Done,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("while setting up the workload controller: %w", err)
	}
	for _, kind := range []stamp.Kind{stamp.KindConfigMap, stamp.KindSecret} {
		w := &SelectorWarner{Kind: kind, Cache: mgr.GetCache(), APIReader: mgr.GetAPIReader(), Recorder: rollout.CountWarnings(mgr.GetEventRecorder("configstamp"))}
		if err := w.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("while setting up the %s selector warnings: %w", kind, err)
		}
	}
	if o.Pin {
		if err := setupPin(mgr, o, writer); err != nil {
			return err
		}
	}
	return addKeyWatcher(mgr, o, wakes)
}

// newScheduler is the one Scheduler of the workload controller: it reads the
// rolling and halted workloads from the cache, in o's scope.
func newScheduler(mgr ctrl.Manager, o Options, resolver *workload.Resolver) *rollout.Scheduler {
	scheduler := rollout.NewScheduler(o.Policy, mgr.GetCache(), o.Keys, o.Kinds)
	scheduler.Rings = &rollout.Rings{Reader: mgr.GetCache(), Selector: o.Rings}
	scheduler.Halts = &rollout.Halts{Reader: mgr.GetCache(), Kinds: o.Kinds, Resolver: resolver, Rings: scheduler.Rings}
	scheduler.Log = mgr.GetLogger().WithName("wave")
	if o.Scope != nil {
		scheduler.InScope = func(ctx context.Context, namespace string) bool {
			ns := &corev1.Namespace{}
			if err := mgr.GetCache().Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
				return false
			}
			return o.Scope.InScope(ns.Name, ns.Labels)
		}
	}
	return scheduler
}

// setupPin adds pinned config's controllers: the hand-over of snapshots to
// the revisions that name them, and the keepers of deleted snapshots.
func setupPin(mgr ctrl.Manager, o Options, writer client.Client) error {
	snapshots := &pin.Snapshots{Reader: mgr.GetAPIReader(), Writer: writer}
	for _, rev := range []func() client.Object{func() client.Object { return &appsv1.ReplicaSet{} }, func() client.Object { return &appsv1.ControllerRevision{} }} {
		if err := (&RevisionOwner{Cache: mgr.GetCache(), Snapshots: snapshots, New: rev}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("while setting up the snapshot hand-over: %w", err)
		}
	}
	return setupKeepers(mgr, o, snapshots)
}

// addKeyWatcher adds the hash key's Watcher: on the leader, a new key wakes
// every workload to re-baseline.
func addKeyWatcher(mgr ctrl.Manager, o Options, wakes Wakes) error {
	clientset, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("while creating a clientset for the hash key: %w", err)
	}
	logger := mgr.GetLogger().WithName("hash-key")
	watcher := &hashkey.Watcher{
		Secret: o.KeySecret, Clientset: clientset, Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Keys: o.Keys, Log: logger,
		OnChange: func(ctx context.Context) {
			select {
			case <-mgr.Elected(): // the leader re-baselines; followers' reconcilers do not run
			default:
				return
			}
			if err := wakes.WakeAll(ctx, mgr.GetCache(), o.Kinds); err != nil {
				logger.Error(err, "while waking the workloads to re-baseline")
			}
		},
	}
	if err := mgr.Add(watcher); err != nil {
		return fmt.Errorf("while adding the hash key watcher: %w", err)
	}
	return nil
}

// setupKeepers adds the SnapshotKeepers of ConfigMaps and Secrets, and the
// cache of snapshot metadata they follow.
func setupKeepers(mgr ctrl.Manager, o Options, snapshots *pin.Snapshots) error {
	cache, err := SnapshotCache(mgr, o.Scope)
	if err != nil {
		return fmt.Errorf("while creating the snapshot cache: %w", err)
	}
	if err := mgr.Add(cache); err != nil {
		return fmt.Errorf("while adding the snapshot cache: %w", err)
	}
	for _, kind := range []stamp.Kind{stamp.KindConfigMap, stamp.KindSecret} {
		k := &SnapshotKeeper{Kind: kind, Cache: mgr.GetCache(), Reader: mgr.GetAPIReader(), Snapshots: snapshots, Keys: o.Keys,
			Recorder: rollout.CountWarnings(mgr.GetEventRecorder("configstamp")), Scope: o.Scope, Kinds: o.Kinds}
		if err := k.SetupWithManager(mgr, cache); err != nil {
			return fmt.Errorf("while setting up the %s snapshot keeper: %w", kind, err)
		}
	}
	return nil
}
