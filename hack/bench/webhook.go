package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// runWebhook creates Deployments, a few at a time, and reads the admission
// latency of configstamp's webhook as kube-apiserver measures it. A first,
// sequential pass shows the latency without contention for the machine's cores.
func runWebhook(ctx context.Context, cfg *config, e *env, res *results) error {
	if err := webhookPass(ctx, cfg, e, res, "bench-webhook-seq", min(50, cfg.webhookCreates), 1); err != nil {
		return err
	}
	return webhookPass(ctx, cfg, e, res, "bench-webhook", cfg.webhookCreates, cfg.webhookParallel)
}

func webhookPass(ctx context.Context, cfg *config, e *env, res *results, ns string, n, parallel int) error {
	f := &fixture{namespaces: []string{ns}, configMaps: n, secrets: n, shared: 1, deployments: n, size: cfg.size, keys: cfg.keys}
	if _, err := f.createSources(ctx, e, cfg.workers); err != nil {
		return err
	}
	before, err := e.apiserverMetrics(ctx)
	if err != nil {
		return err
	}
	hookBefore, err := e.configstamp.webhookLatency()
	if err != nil {
		return err
	}
	cpuBefore := e.cpuTimes()
	from := time.Now()
	latencies, err := f.createDeployments(ctx, e, parallel)
	if err != nil {
		return err
	}
	to := time.Now()
	cpuAfter := e.cpuTimes()
	after, err := e.apiserverMetrics(ctx)
	if err != nil {
		return err
	}
	hookAfter, err := e.configstamp.webhookLatency()
	if err != nil {
		return err
	}
	at := fmt.Sprintf("%d at a time", parallel)
	e.windowPer(scWebhook+", "+at, from, to, n, "creation")

	const metric = "apiserver_admission_webhook_admission_duration_seconds"
	creates := func(l map[string]string) bool {
		return strings.HasSuffix(l["name"], ".configstamp.io") && l["operation"] == "CREATE"
	}
	h := after.histogramOf(metric, creates).minus(before.histogramOf(metric, creates))
	res.add(scWebhook, fmt.Sprintf("%d Deployment creations, %s", n, at), fmtDuration(to.Sub(from)))
	res.add(scWebhook, at+": admission latency of configstamp's webhook, API server's histogram, p50 / p99 (interpolated within buckets)",
		fmt.Sprintf("%s / %s (n=%.0f, mean %s)", fmtSeconds(h.quantile(0.5)), fmtSeconds(h.quantile(0.99)), h.count, fmtSeconds(h.mean())))
	res.add(scWebhook, at+": API server's histogram buckets (delta)", h.bucketsText())
	res.addCPU(scWebhook, "creations "+at, cpuBefore, cpuAfter, to.Sub(from))
	hook := hookAfter.minus(hookBefore)
	res.add(scWebhook, at+": configstamp's own webhook handling time, mean (its histogram has decade buckets)",
		fmt.Sprintf("%s (n=%.0f; %s)", fmtSeconds(hook.mean()), hook.count, hook.bucketsText()))
	res.addDurations(scWebhook, at+": Deployment CREATE latency (client side)", latencies)
	failOpen := after.sum("apiserver_admission_webhook_fail_open_count", configstampWebhook) -
		before.sum("apiserver_admission_webhook_fail_open_count", configstampWebhook)
	res.add(scWebhook, at+": webhook calls failed open (timeout/error)", fmt.Sprintf("%.0f", failOpen))
	unstamped, err := f.waitRecorded(ctx, e, 2*time.Minute)
	if err != nil {
		return err
	}
	res.add(scWebhook, at+": Deployments created without a template stamp", fmt.Sprint(unstamped))
	return nil
}

func configstampWebhook(l map[string]string) bool {
	return strings.HasSuffix(l["name"], ".configstamp.io")
}

// webhookFailOpen is the API server's count of configstamp webhook calls that
// failed open (timeout or error; failurePolicy Ignore admitted the request).
func (e *env) webhookFailOpen(ctx context.Context) (float64, error) {
	ss, err := e.apiserverMetrics(ctx)
	if err != nil {
		return 0, err
	}
	return ss.sum("apiserver_admission_webhook_fail_open_count", configstampWebhook), nil
}
