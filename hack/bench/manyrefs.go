package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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
// Each time the same CREATEs also pass the no-op webhook only (the floor,
// noopWebhook): what the hostile tenant costs any webhook on this machine.
func runManyRefs(ctx context.Context, cfg *config, e *env, res *results) error {
	stopNoop, err := noopWebhook(ctx, e)
	if err != nil {
		return err
	}
	defer stopNoop()
	n := min(100, cfg.webhookCreates)
	if err := manyRefsPasses(ctx, cfg, e, res, "alone", n); err != nil {
		return err
	}
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
	err = manyRefsPasses(ctx, cfg, e, res, fmt.Sprintf("while one tenant sends %d-reference templates", hostileRefs), n)
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	res.add(scManyRefs, fmt.Sprintf("hostile %d-reference CREATEs (dry run) sent meanwhile, refused", hostileRefs),
		fmt.Sprintf("%d in %s, %d refused", sent.Load(), fmtDuration(time.Since(began)), failed.Load()))
	return nil
}

// manyRefsPasses creates n Deployments of the other tenant through
// configstamp's webhook, then n through the no-op webhook only, 4 at a time,
// and adds both latencies and the ratio of their p99s.
func manyRefsPasses(ctx context.Context, cfg *config, e *env, res *results, when string, n int) error {
	var p99 [2]time.Duration
	for i, noop := range []bool{false, true} {
		ns, through := "bench-refs-"+strconv.Itoa(len(res.rows)), "configstamp's webhook"
		if noop {
			through = "the no-op webhook only (the floor)"
		}
		f := &fixture{namespaces: []string{ns}, configMaps: n, secrets: n, shared: 1, deployments: n, size: cfg.size, keys: cfg.keys, noop: noop}
		if _, err := f.createSources(ctx, e, cfg.workers); err != nil {
			return err
		}
		latencies, err := f.createDeployments(ctx, e, 4)
		if err != nil {
			return err
		}
		res.addDurations(scManyRefs, fmt.Sprintf("other tenant: %d Deployment CREATEs, 4 at a time, %s, through %s (client side)", n, when, through), latencies)
		sorted := slices.Clone(latencies)
		slices.Sort(sorted)
		p99[i] = percentile(sorted, 99)
	}
	res.add(scManyRefs, "other tenant's p99 "+when+": configstamp / the floor", fmt.Sprintf("%.2fx", float64(p99[0])/float64(p99[1])))
	return nil
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
