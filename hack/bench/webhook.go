package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// runWebhook creates Deployments, a few at a time, and reads the admission
// latency of configstamp's webhook as kube-apiserver measures it, next to
// the floor: the same CREATEs through a webhook that admits them unchanged
// (noopWebhook), at the same concurrency. A first, sequential pass shows the
// latency without contention for the machine's cores.
func runWebhook(ctx context.Context, cfg *config, e *env, res *results) error {
	stop, err := noopWebhook(ctx, e)
	if err != nil {
		return err
	}
	defer stop()
	type pass struct {
		ns          string
		n, parallel int
	}
	passes := []pass{{"bench-webhook-seq", min(50, cfg.webhookCreates), 1}, {"bench-webhook", cfg.webhookCreates, cfg.webhookParallel}}
	if cfg.webhookParallel != 100 {
		passes = append(passes, pass{"bench-webhook-100", cfg.webhookCreates, 100})
	}
	for _, p := range passes {
		hook, hookCreates, err := webhookPass(ctx, cfg, e, res, p.ns, p.n, p.parallel)
		if err != nil {
			return err
		}
		floor, floorCreates, err := floorPass(ctx, cfg, e, p.ns+"-floor", p.n, p.parallel)
		if err != nil {
			return err
		}
		at := fmt.Sprintf("%d at a time", p.parallel)
		res.addDurations(scWebhook, at+": the floor's Deployment CREATE latency (client side)", floorCreates)
		res.add(scWebhook, at+": admission p50 / p99, configstamp vs a no-op webhook (the floor), API server's histogram (buckets 5, 10, 25, 100, 500 ms ...)",
			fmt.Sprintf("%s / %s vs %s / %s: p99 %.2fx the floor", fmtSeconds(hook.quantile(0.5)), fmtSeconds(hook.quantile(0.99)),
				fmtSeconds(floor.quantile(0.5)), fmtSeconds(floor.quantile(0.99)), hook.quantile(0.99)/floor.quantile(0.99)))
		hook50, hook99 := percentiles(hookCreates)
		floor50, floor99 := percentiles(floorCreates)
		ratio := float64(hook99) / float64(floor99)
		res.goal(scWebhook, at+": Deployment CREATE p50 / p99 (client side), through configstamp vs through a no-op webhook (the floor)",
			fmt.Sprintf("%s / %s vs %s / %s: p99 %.2fx the floor", fmtDuration(hook50), fmtDuration(hook99), fmtDuration(floor50), fmtDuration(floor99), ratio),
			"p99 <= 1.5x the floor", ratio <= 1.5)
	}
	return nil
}

// percentiles returns the nearest-rank p50 and p99 of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	s := slices.Sorted(slices.Values(ds))
	return percentile(s, 50), percentile(s, 99)
}

// floorPass creates n Deployments like webhookPass's, parallel at a time, that
// only the no-op webhook admits, and returns its admission latencies and the
// CREATE latencies.
func floorPass(ctx context.Context, cfg *config, e *env, ns string, n, parallel int) (histogram, []time.Duration, error) {
	f := &fixture{namespaces: []string{ns}, configMaps: n, secrets: n, shared: 1, deployments: n, size: cfg.size, keys: cfg.keys, noop: true}
	if _, err := f.createSources(ctx, e, cfg.workers); err != nil {
		return histogram{}, nil, err
	}
	const metric = "apiserver_admission_webhook_admission_duration_seconds"
	noop := func(l map[string]string) bool { return l["name"] == noopWebhookName && l["operation"] == "CREATE" }
	before, err := e.apiserverMetrics(ctx)
	if err != nil {
		return histogram{}, nil, err
	}
	latencies, err := f.createDeployments(ctx, e, parallel)
	if err != nil {
		return histogram{}, nil, err
	}
	after, err := e.apiserverMetrics(ctx)
	if err != nil {
		return histogram{}, nil, err
	}
	h := after.histogramOf(metric, noop).minus(before.histogramOf(metric, noop))
	if h.count < float64(n) {
		return histogram{}, nil, fmt.Errorf("the no-op webhook admitted %.0f of %d Deployments", h.count, n)
	}
	return h, latencies, nil
}

// webhookPass creates n Deployments through configstamp's webhook, parallel
// at a time, adds its figures and returns its admission latencies and the
// CREATE latencies.
func webhookPass(ctx context.Context, cfg *config, e *env, res *results, ns string, n, parallel int) (histogram, []time.Duration, error) {
	f := &fixture{namespaces: []string{ns}, configMaps: n, secrets: n, shared: 1, deployments: n, size: cfg.size, keys: cfg.keys}
	if _, err := f.createSources(ctx, e, cfg.workers); err != nil {
		return histogram{}, nil, err
	}
	before, err := e.apiserverMetrics(ctx)
	if err != nil {
		return histogram{}, nil, err
	}
	hookBefore, err := e.configstamp.webhookLatency()
	if err != nil {
		return histogram{}, nil, err
	}
	cpuBefore := e.cpuTimes()
	from := time.Now()
	latencies, err := f.createDeployments(ctx, e, parallel)
	if err != nil {
		return histogram{}, nil, err
	}
	to := time.Now()
	cpuAfter := e.cpuTimes()
	after, err := e.apiserverMetrics(ctx)
	if err != nil {
		return histogram{}, nil, err
	}
	hookAfter, err := e.configstamp.webhookLatency()
	if err != nil {
		return histogram{}, nil, err
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
		return histogram{}, nil, err
	}
	res.add(scWebhook, at+": Deployments created without a template stamp", fmt.Sprint(unstamped))
	return h, latencies, nil
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
