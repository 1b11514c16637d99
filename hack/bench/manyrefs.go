package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// hostileRefs is how many ConfigMaps the hostile tenant's templates reference.
const hostileRefs = 5000

// runManyRefs measures another tenant's Deployment CREATE latency through
// configstamp's webhook, alone and while one tenant keeps sending templates
// that reference 5,000 ConfigMaps (server-side dry runs, two at a time, so
// nothing is stored): configstamp reads none of them (stamp.MaxReferences).
func runManyRefs(ctx context.Context, cfg *config, e *env, res *results) error {
	n := min(100, cfg.webhookCreates)
	alone, err := manyRefsPass(ctx, cfg, e, "bench-refs-alone", n)
	if err != nil {
		return err
	}
	res.addDurations(scManyRefs, fmt.Sprintf("other tenant: %d Deployment CREATEs, 4 at a time, alone (client side)", n), alone)

	if _, err := (&fixture{namespaces: []string{"bench-refs-hostile"}}).createSources(ctx, e, cfg.workers); err != nil {
		return err
	}
	hostileCtx, stop := context.WithCancel(ctx)
	var sent, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; hostileCtx.Err() == nil; i++ {
				if err := e.client.Create(hostileCtx, hostileDeployment(fmt.Sprintf("hostile-%d-%d", w, i)), client.DryRunAll); err != nil && hostileCtx.Err() == nil {
					failed.Add(1)
				}
				sent.Add(1)
			}
		})
	}
	began := time.Now()
	loaded, err := manyRefsPass(ctx, cfg, e, "bench-refs-loaded", n)
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	res.addDurations(scManyRefs, fmt.Sprintf("other tenant: the same, while one tenant sends %d-reference templates (client side)", hostileRefs), loaded)
	res.add(scManyRefs, fmt.Sprintf("hostile %d-reference CREATEs (dry run) sent meanwhile, refused", hostileRefs),
		fmt.Sprintf("%d in %s, %d refused", sent.Load(), fmtDuration(time.Since(began)), failed.Load()))
	return nil
}

func manyRefsPass(ctx context.Context, cfg *config, e *env, ns string, n int) ([]time.Duration, error) {
	f := &fixture{namespaces: []string{ns}, configMaps: n, secrets: n, shared: 1, deployments: n, size: cfg.size, keys: cfg.keys}
	if _, err := f.createSources(ctx, e, cfg.workers); err != nil {
		return nil, err
	}
	return f.createDeployments(ctx, e, 4)
}

// hostileDeployment is an opted-in Deployment of bench-refs-hostile whose
// template references hostileRefs ConfigMaps through one projected volume.
func hostileDeployment(name string) *appsv1.Deployment {
	sources := make([]corev1.VolumeProjection, hostileRefs)
	for i := range sources {
		sources[i] = corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("ref-%05d", i)}}}
	}
	pod := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench-refs-hostile", Name: name, Labels: map[string]string{stamp.LabelEnabled: "true"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: pod},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
					VolumeMounts: []corev1.VolumeMount{{Name: "all", MountPath: "/config"}}}},
				Volumes: []corev1.Volume{{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}},
			}},
		},
	}
}
