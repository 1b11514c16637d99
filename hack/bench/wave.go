package main

import (
	"context"
	"fmt"
	"time"
)

// runWave measures a budgeted wave against its ideal. cfg.wave Deployments of
// one pod each (kwok makes it Ready) share one ConfigMap, and configstamp runs
// with --max-concurrent-rollouts=cfg.waveBudget and no debounce. First one
// Deployment's own ConfigMap changes alone: the time from the Update's answer
// to that rollout being complete is one rollout. Then the shared ConfigMap
// changes: the time until every rollout is complete is the wave, against the
// ideal of ceil(wave / budget) rollouts one after the other.
func runWave(ctx context.Context, cfg *config, e *env, res *results) error {
	const ns = "bench-wave"
	n, budget := cfg.wave, cfg.waveBudget
	if err := e.configstamp.stop(); err != nil {
		return err
	}
	args := append([]string{"--debounce=0", fmt.Sprintf("--max-concurrent-rollouts=%d", budget)}, cfg.extraArgs...)
	if _, err := e.startConfigstampWith(ctx, "configstamp-wave.log", args); err != nil {
		return err
	}
	f := &fixture{namespaces: []string{ns}, configMaps: n, secrets: n, shared: 1, deployments: n, size: cfg.size, keys: cfg.keys, replicas: 1}
	if err := f.setup(ctx, e, cfg); err != nil {
		return err
	}
	before, err := f.generations(ctx, e)
	if err != nil {
		return err
	}
	answered, err := f.updateConfigMap(ctx, e, ns, f.configMapName(0), "v2")
	if err != nil {
		return err
	}
	if err := f.waitRolledOut(ctx, e, before, 1, 5*time.Minute); err != nil {
		return err
	}
	one := time.Since(answered)
	if before, err = f.generations(ctx, e); err != nil {
		return err
	}
	answered, err = f.updateConfigMap(ctx, e, ns, f.sharedName(0), "v2")
	if err != nil {
		return err
	}
	if err := f.waitRolledOut(ctx, e, before, n, 30*time.Minute); err != nil {
		return err
	}
	wave := time.Since(answered)
	rounds := (n + budget - 1) / budget
	ideal := time.Duration(rounds) * one
	res.add(scWave, "one rollout alone: its own ConfigMap's Update response → rollout complete (1 pod, kwok)", fmtDuration(one))
	res.add(scWave, fmt.Sprintf("wave: a ConfigMap shared by %d Deployments, budget %d: Update response → every rollout complete", n, budget), fmtDuration(wave))
	res.add(scWave, fmt.Sprintf("the ideal: %d rounds of one rollout (ceil(%d / %d))", rounds, n, budget), fmtDuration(ideal))
	res.add(scWave, "wave / the ideal", fmt.Sprintf("%.2fx", wave.Seconds()/ideal.Seconds()))
	if err := e.configstamp.stop(); err != nil {
		return err
	}
	_, err = e.startConfigstamp(ctx, "configstamp.log")
	return err
}

// generations returns the generation of every Deployment of the fixture.
func (f *fixture) generations(ctx context.Context, e *env) (map[string]int64, error) {
	deps, err := f.list(ctx, e)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, d := range deps {
		out[d.Namespace+"/"+d.Name] = d.Generation
	}
	return out, nil
}

// waitRolledOut polls until want Deployments of the fixture have a newer
// generation than in before and report that rollout complete.
func (f *fixture) waitRolledOut(ctx context.Context, e *env, before map[string]int64, want int, timeout time.Duration) error {
	return poll(ctx, "rollouts complete", timeout, 100*time.Millisecond, func() (bool, string, error) {
		deps, err := f.list(ctx, e)
		if err != nil {
			return false, "", err
		}
		done := 0
		for _, d := range deps {
			if d.Generation > before[d.Namespace+"/"+d.Name] && complete(d) {
				done++
			}
		}
		return done >= want, fmt.Sprintf("%d of %d rollouts complete", done, want), nil
	})
}
