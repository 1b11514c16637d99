package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// runSweep measures configstamp's memory at the same object count and
// different data sizes. Each size gets a fresh control plane (etcd and
// kube-apiserver) and a fresh configstamp started after the objects exist:
// the install-into-a-running-cluster case, where the initial list of every
// ConfigMap and Secret is the peak.
func runSweep(ctx context.Context, cfg *config, res *results) error {
	var peaks []uint64
	for _, size := range cfg.sweepSizes {
		logf("== scenario %s, %s", scSweep, fmtBytes(uint64(size)))
		hwm, err := sweepOne(ctx, cfg, res, size)
		if err != nil {
			return fmt.Errorf("scenario %s at %s: %w", scSweep, fmtBytes(uint64(size)), err)
		}
		peaks = append(peaks, hwm)
	}
	if len(peaks) > 1 {
		lo, hi := peaks[0], peaks[0]
		for _, p := range peaks {
			lo, hi = min(lo, p), max(hi, p)
		}
		res.add(scSweep, "peak RSS, largest / smallest size", fmt.Sprintf("%.2f× (%s vs %s)", float64(hi)/float64(lo), fmtBytes(hi), fmtBytes(lo)))
	}
	return nil
}

func sweepOne(ctx context.Context, cfg *config, res *results, size int) (hwm uint64, err error) {
	label := fmtBytes(uint64(size))
	scenario := fmt.Sprintf("%s %s", scSweep, label)
	e, err := startEnv(ctx, cfg, filepath.Join(cfg.outDir, fmt.Sprintf("sweep-%d", size)), false)
	if err != nil {
		return 0, err
	}
	defer func() {
		if stopErr := e.stop(cfg.keep); err == nil {
			err = stopErr
		}
	}()
	f := &fixture{
		namespaces: namespaces("sweep", cfg.namespaces), configMaps: cfg.sweepCount, secrets: cfg.sweepCount,
		shared: 10, deployments: min(cfg.deployments, cfg.sweepCount), size: size, keys: cfg.keys,
	}
	took, err := f.createSources(ctx, e, cfg.workers)
	if err != nil {
		return 0, err
	}
	if _, err := f.createDeployments(ctx, e, cfg.workers); err != nil {
		return 0, err
	}
	res.add(scenario, "created (configstamp not running yet)", fmt.Sprintf("%s; ConfigMaps + Secrets %s",
		e.inventory, rate(e.inventory.configMaps+e.inventory.secrets, took)))
	p, err := e.startConfigstamp(ctx, fmt.Sprintf("configstamp-sweep-%d.log", size))
	if err != nil {
		return 0, err
	}
	res.add(scenario, "process start → /readyz 200", fmtDuration(p.readyAfter))
	// Found unstamped, every Deployment gets a baseline record.
	if _, err := f.waitRecorded(ctx, e, 5*time.Minute); err != nil {
		return 0, err
	}
	if err := p.waitIdle(ctx, 5*time.Minute); err != nil {
		return 0, err
	}
	mem, err := p.memory()
	if err != nil {
		return 0, err
	}
	if err := res.addMemory(p, scenario, "after start and sync"); err != nil {
		return 0, err
	}
	return mem.hwm, nil
}
