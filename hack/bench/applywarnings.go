package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Scale of the apply-warnings scenario: ConfigMaps, opted-in Deployments
// (each reads key "a" of one ConfigMap, so every update rolls
// warnDeployments/warnConfigMaps of them), and sequential updates per pass.
const (
	warnConfigMaps  = 20
	warnDeployments = 100
	warnUpdates     = 200
)

// runApplyWarnings measures what --apply-warnings adds to a ConfigMap
// UPDATE, on a control plane of its own: the same sequential updates of
// referenced data with configstamp running without the flag, then with it
// (the ValidatingWebhookConfiguration registered). Client-side UPDATE
// latency both times, and the API server's own histogram of the warning
// webhook's admission time.
func runApplyWarnings(ctx context.Context, cfg *config, res *results) (err error) {
	e, err := startEnv(ctx, cfg, filepath.Join(cfg.outDir, scApplyWarnings), false)
	if err != nil {
		return err
	}
	defer func() {
		if stopErr := e.stop(cfg.keep); err == nil {
			err = stopErr
		}
	}()
	for _, on := range []bool{false, true} {
		args := append([]string{}, cfg.configstampArgs...)
		what := "without --apply-warnings"
		if on {
			args = append(args, "--apply-warnings")
			what = "with --apply-warnings"
		}
		if e.configstamp != nil {
			if err := e.configstamp.stop(); err != nil {
				return err
			}
		}
		cs, err := e.startConfigstampWith(ctx, "configstamp-"+scApplyWarnings+"-"+strconv.FormatBool(on)+".log", args)
		if err != nil {
			return err
		}
		ns := "bench-warn-" + strconv.FormatBool(on)
		if err := warnFixture(ctx, e, ns); err != nil {
			return err
		}
		if err := cs.waitIdle(ctx, 2*time.Minute); err != nil {
			return err
		}
		before, err := e.apiserverMetrics(ctx)
		if err != nil {
			return err
		}
		var latencies []time.Duration
		for i := range warnUpdates {
			cm := &corev1.ConfigMap{}
			name := fmt.Sprintf("warn-%d", i%warnConfigMaps)
			if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
				return err
			}
			cm.Data["a"] = strconv.Itoa(i)
			start := time.Now()
			if err := e.client.Update(ctx, cm); err != nil {
				return fmt.Errorf("while updating ConfigMap %s/%s: %w", ns, name, err)
			}
			latencies = append(latencies, time.Since(start))
		}
		after, err := e.apiserverMetrics(ctx)
		if err != nil {
			return err
		}
		res.addDurations(scApplyWarnings, fmt.Sprintf("%s: ConfigMap UPDATE latency, client side, %d sequential updates each rolling %d Deployments",
			what, warnUpdates, warnDeployments/warnConfigMaps), latencies)
		if on {
			const metric = "apiserver_admission_webhook_admission_duration_seconds"
			warn := func(l map[string]string) bool { return l["name"] == "apply-warnings.configstamp.io" }
			h := after.histogramOf(metric, warn).minus(before.histogramOf(metric, warn))
			res.add(scApplyWarnings, what+": the warning webhook's admission time, API server's histogram, p50 / p99 (interpolated within buckets)",
				fmt.Sprintf("%s / %s (n=%.0f, mean %s)", fmtSeconds(h.quantile(0.5)), fmtSeconds(h.quantile(0.99)), h.count, fmtSeconds(h.mean())))
		}
		if err := cs.waitIdle(ctx, 2*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// warnFixture creates ns with warnConfigMaps ConfigMaps (keys a, b) and
// warnDeployments opted-in Deployments, Deployment i reading key a of
// ConfigMap i mod warnConfigMaps.
func warnFixture(ctx context.Context, e *env, ns string) error {
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	for i := range warnConfigMaps {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("warn-%d", i)},
			Data: map[string]string{"a": "0", "b": "0"}}
		if err := e.client.Create(ctx, cm); err != nil {
			return err
		}
	}
	for i := range warnDeployments {
		name := fmt.Sprintf("warn-%d", i)
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{stamp.LabelEnabled: "true"}},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
						Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
							LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("warn-%d", i%warnConfigMaps)}, Key: "a"}}}},
					}}},
				},
			},
		}
		if err := e.client.Create(ctx, d); err != nil {
			return err
		}
	}
	return nil
}
