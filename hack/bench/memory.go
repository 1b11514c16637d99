package main

import (
	"context"
	"fmt"
	"time"
)

// runMemory creates the memory scenario's population while configstamp runs
// (so the webhook stamps every Deployment at CREATE), waits until every
// Deployment carries the stamp and configstamp is idle, and reads its memory.
func runMemory(ctx context.Context, cfg *config, e *env, res *results) error {
	f := &fixture{
		namespaces: namespaces("mem", cfg.namespaces), configMaps: cfg.configMaps, secrets: cfg.secrets,
		shared: 10, deployments: cfg.deployments, size: cfg.size, keys: cfg.keys,
	}
	from := time.Now()
	took, err := f.createSources(ctx, e, cfg.workers)
	if err != nil {
		return err
	}
	n := f.shared*len(f.namespaces) + f.configMaps + f.secrets
	res.add(scMemory, "created ConfigMaps + Secrets (benchmark client)", rate(n, took))
	began := time.Now()
	latencies, err := f.createDeployments(ctx, e, cfg.deployWorkers)
	if err != nil {
		return err
	}
	res.add(scMemory, fmt.Sprintf("created Deployments through the webhook, %d at a time", cfg.deployWorkers), rate(f.deployments, time.Since(began)))
	unstamped, err := f.waitRecorded(ctx, e, 5*time.Minute)
	if err != nil {
		return err
	}
	res.add(scMemory, "Deployments created without a template stamp (webhook missed them)", fmt.Sprint(unstamped))
	if err := e.configstamp.waitIdle(ctx, 5*time.Minute); err != nil {
		return err
	}
	synced := time.Now()
	e.windowPer(scMemory, from, synced, f.deployments, "Deployment created")
	res.addDurations(scMemory, "Deployment CREATE latency (client side, webhook included)", latencies)
	if err := res.addMemory(e.configstamp, scMemory, "after sync"); err != nil {
		return err
	}
	if target, ok := memoryTarget(cfg); ok {
		mem, err := e.configstamp.memory()
		if err != nil {
			return err
		}
		res.goal(scMemory, "peak RSS after sync", fmtBytes(mem.hwm), "< "+fmtBytes(target), mem.hwm < target)
	}
	return addMemoryFloor(ctx, e, res)
}

// addMemoryFloor adds the memory floor (memoryFloor) and configstamp's
// distance to it.
func addMemoryFloor(ctx context.Context, e *env, res *results) error {
	mem, err := e.configstamp.memory()
	if err != nil {
		return err
	}
	floor, err := memoryFloor(ctx, e)
	if err != nil {
		return err
	}
	res.add(scMemory, "floor: bare controller-runtime manager caching the same objects (names only), peak RSS / RSS",
		fmt.Sprintf("%s / %s (anon %s, file %s)", fmtBytes(floor.hwm), fmtBytes(floor.rss), fmtBytes(floor.anon), fmtBytes(floor.file)))
	res.add(scMemory, "configstamp above the floor: peak RSS, anon, file",
		fmt.Sprintf("+%s (%.2f×), %+.1f MiB, %+.1f MiB", fmtBytes(mem.hwm-min(mem.hwm, floor.hwm)), float64(mem.hwm)/float64(floor.hwm),
			(float64(mem.anon)-float64(floor.anon))/(1<<20), (float64(mem.file)-float64(floor.file))/(1<<20)))
	return nil
}

// memoryTarget is the RSS target, for the two scales it names.
func memoryTarget(cfg *config) (uint64, bool) {
	if cfg.size != 10<<10 {
		return 0, false
	}
	switch {
	case cfg.configMaps == 10000 && cfg.secrets == 10000:
		return 64 << 20, true
	case cfg.configMaps == 2000 && cfg.secrets == 2000 && cfg.deployments == 500:
		return 40 << 20, true
	}
	return 0, false
}
