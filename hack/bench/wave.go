package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/configstamp/configstamp/controllers/rollout"
)

// runWave measures a budgeted wave against its ideal. cfg.wave Deployments of
// one pod each (kwok makes it Ready) share one ConfigMap, and configstamp runs
// with --max-concurrent-rollouts=cfg.waveBudget, --verify-window=cfg.waveWindow
// and no debounce. First one Deployment's own ConfigMap changes alone: the
// time from the Update's answer to that rollout being completed (verified:
// configstamp's record says completed, the window included) is one rollout.
// Then the shared ConfigMap changes: the time until every rollout is completed
// is the wave, against the ideal of ceil(wave / budget) rollouts one after
// the other.
func runWave(ctx context.Context, cfg *config, e *env, res *results) error {
	const ns = "bench-wave"
	n, budget := cfg.wave, cfg.waveBudget
	if err := e.configstamp.stop(); err != nil {
		return err
	}
	args := append([]string{"--debounce=0", fmt.Sprintf("--max-concurrent-rollouts=%d", budget), "--verify-window=" + cfg.waveWindow.String()}, cfg.extraArgs...)
	if _, err := e.startConfigstampWith(ctx, "configstamp-wave.log", args); err != nil {
		return err
	}
	f := &fixture{namespaces: []string{ns}, configMaps: n, secrets: n, shared: 1, deployments: n, size: cfg.size, keys: cfg.keys, replicas: 1}
	if err := f.setup(ctx, e, cfg); err != nil {
		return err
	}
	w, err := watchStamps(ctx, e, ns)
	if err != nil {
		return err
	}
	defer w.stop()
	// One rollout alone varies from run to run (56-247 ms seen on 2 cores):
	// the ideal's unit is the median of a few.
	var lone []time.Duration
	for i := range min(loneRollouts, n) {
		before := w.generations()
		answered, err := f.updateConfigMap(ctx, e, ns, f.configMapName(i), "v2")
		if err != nil {
			return err
		}
		if err := w.waitRolledOut(ctx, before, 1, 5*time.Minute); err != nil {
			return err
		}
		lone = append(lone, time.Since(answered))
	}
	slices.Sort(lone)
	one := lone[len(lone)/2]
	before, cpuBefore := w.generations(), e.cpuTimes()
	answered, err := f.updateConfigMap(ctx, e, ns, f.sharedName(0), "v2")
	if err != nil {
		return err
	}
	if err := w.waitRolledOut(ctx, before, n, 30*time.Minute); err != nil {
		return err
	}
	wave := time.Since(answered)
	res.addCPU(scWave, "over the wave", cpuBefore, e.cpuTimes(), wave)
	rounds := (n + budget - 1) / budget
	ideal := time.Duration(rounds) * one
	res.add(scWave, fmt.Sprintf("one rollout alone: its own ConfigMap's Update response → rollout completed, verified for %v (1 pod, kwok; median of %d: %s)", cfg.waveWindow, len(lone), fmtDurations(lone)), fmtDuration(one))
	res.add(scWave, fmt.Sprintf("wave: a ConfigMap shared by %d Deployments, budget %d, window %v: Update response → every rollout completed", n, budget, cfg.waveWindow), fmtDuration(wave))
	res.add(scWave, fmt.Sprintf("the ideal: %d rounds of one rollout (ceil(%d / %d))", rounds, n, budget), fmtDuration(ideal))
	res.add(scWave, "wave / the ideal", fmt.Sprintf("%.2fx", wave.Seconds()/ideal.Seconds()))
	if err := e.configstamp.stop(); err != nil {
		return err
	}
	_, err = e.startConfigstamp(ctx, "configstamp.log")
	return err
}

// loneRollouts is how many single rollouts the ideal's unit is the median of.
const loneRollouts = 5

// generations returns the generation of every Deployment seen.
func (w *stampWatch) generations() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int64, len(w.latest))
	for name, d := range w.latest {
		out[name] = d.Generation
	}
	return out
}

// waitRolledOut waits until want Deployments have a newer generation than in
// before, report that rollout complete and configstamp's record says it
// completed (verified). It follows the watch: listing the
// Deployments every 100 ms cost the bench client, and the API server it
// measures, as much CPU as a tenth of the wave.
func (w *stampWatch) waitRolledOut(ctx context.Context, before map[string]int64, want int, timeout time.Duration) error {
	return w.await(ctx, "rollouts complete", timeout, func(latest map[string]*appsv1.Deployment) (bool, string) {
		done := 0
		for name, d := range latest {
			if d.Generation > before[name] && complete(*d) && rollout.Read(d.Annotations).State == rollout.Completed {
				done++
			}
		}
		return done >= want, fmt.Sprintf("%d of %d rollouts complete", done, want)
	})
}
