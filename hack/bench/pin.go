package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
)

// runPin is runLatency's first pass with pinned config: configstamp run with
// --pin, each Deployment pinned (configstamp.io/pin), so that every change
// also makes a snapshot in the webhook before the template names it. It
// reports change → restamp beside the unpinned figures, and the objects
// (snapshots) made at creation and per change. Snapshots are never cached
// (controllers.CacheOptions), so the memory scenario's heap per cached object
// holds with pinning.
func runPin(ctx context.Context, cfg *config, e *env, res *results) error {
	if err := e.configstamp.stop(); err != nil {
		return err
	}
	if _, err := e.startConfigstampWith(ctx, "configstamp-pin.log", append(append([]string{}, e.cfg.configstampArgs...), "--pin")); err != nil {
		return err
	}
	const ns = "bench-pin"
	var created int
	err := latencyPass(ctx, cfg, e, res, scPin, ns, "same as latency, pinned Deployments (--pin)", true)
	if err == nil {
		created, err = countSnapshots(ctx, e, ns)
	}
	if err != nil {
		return err
	}
	n := cfg.latencyChanges
	// At creation each Deployment pins its ConfigMap and its Secret (2 each)
	// and the shared ConfigMap (1 for all); each change makes one more.
	res.add(scPin, "snapshots made", fmt.Sprintf("%d for %d pinned Deployments and %d changes (%.2f per change after the %d of creation)",
		created, n, n, float64(created-(2*n+1))/float64(n), 2*n+1))
	cms, secrets := &corev1.ConfigMapList{}, &corev1.SecretList{}
	if err := e.client.List(ctx, cms); err != nil {
		return err
	}
	if err := e.client.List(ctx, secrets); err != nil {
		return err
	}
	// The heap profile's object counts (cache replica) leave the snapshots out.
	res.add(scPin, "ConfigMaps / Secrets in the cluster after it, snapshots included", fmt.Sprintf("%d / %d", len(cms.Items), len(secrets.Items)))
	if err := e.configstamp.stop(); err != nil {
		return err
	}
	_, err = e.startConfigstamp(ctx, "configstamp.log")
	return err
}

// countSnapshots counts the snapshots in ns (ConfigMaps and Secrets).
func countSnapshots(ctx context.Context, e *env, ns string) (int, error) {
	sel := client.MatchingLabels{pin.LabelSnapshot: "true"}
	cms, secrets := &corev1.ConfigMapList{}, &corev1.SecretList{}
	if err := e.client.List(ctx, cms, client.InNamespace(ns), sel); err != nil {
		return 0, err
	}
	if err := e.client.List(ctx, secrets, client.InNamespace(ns), sel); err != nil {
		return 0, err
	}
	return len(cms.Items) + len(secrets.Items), nil
}
