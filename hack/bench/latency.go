package main

import (
	"context"
	"time"
)

// runLatency changes distinct ConfigMaps one after the other, each referenced
// by one Deployment, and times each change from the Update's response to the
// new template stamp arriving on a watch started beforehand: first with the
// run's flags (no budget, no debounce), then with the default budget of
// concurrent rollouts (10) and no debounce, where a single change with free
// slots must not wait for a wave to gather.
func runLatency(ctx context.Context, cfg *config, e *env, res *results) error {
	if err := latencyPass(ctx, cfg, e, res, scLatency, "bench-latency", "ConfigMap Update response → template restamped (watch)", false); err != nil {
		return err
	}
	if err := e.configstamp.stop(); err != nil {
		return err
	}
	// No canary: see rolloutFlags.
	if _, err := e.startConfigstampWith(ctx, "configstamp-budget.log", append([]string{"--debounce=0", "--canary=false"}, cfg.extraArgs...)); err != nil {
		return err
	}
	if err := latencyPass(ctx, cfg, e, res, scLatency, "bench-latency-budget",
		"same, default budget (--max-concurrent-rollouts=10), --debounce=0, --canary=false", false); err != nil {
		return err
	}
	if err := e.configstamp.stop(); err != nil {
		return err
	}
	_, err := e.startConfigstamp(ctx, "configstamp.log")
	return err
}

// latencyPass times cfg.latencyChanges changes in namespace ns, each of a
// ConfigMap one Deployment (pinned or not) mounts, under scenario.
func latencyPass(ctx context.Context, cfg *config, e *env, res *results, scenario, ns, what string, pinned bool) error {
	n := cfg.latencyChanges
	f := &fixture{namespaces: []string{ns}, configMaps: n, secrets: n, shared: 1, deployments: n, size: cfg.size, keys: cfg.keys, pinned: pinned}
	if err := f.setup(ctx, e, cfg); err != nil {
		return err
	}
	w, err := watchStamps(ctx, e, ns)
	if err != nil {
		return err
	}
	defer w.stop()
	from := time.Now()
	latencies := make([]time.Duration, 0, n)
	for i := range n {
		name := f.deploymentName(i)
		before := w.stamps()
		answered, err := f.updateConfigMap(ctx, e, ns, f.configMapName(i), "v2")
		if err != nil {
			return err
		}
		seen, err := w.waitChanged(ctx, before, []string{name}, time.Minute)
		if err != nil {
			return err
		}
		latencies = append(latencies, seen[name].Sub(answered))
	}
	if err := f.waitSettled(ctx, e, 2*time.Minute); err != nil {
		return err
	}
	e.windowPer(scenario, from, time.Now(), n, "change")
	res.addDurations(scenario, what, latencies)
	return nil
}
