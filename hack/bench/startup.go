package main

import (
	"context"
	"time"
)

// runStartup restarts configstamp with every object of the earlier scenarios
// present and times process start to /readyz 200 (caches synced, webhook
// serving); then it waits until configstamp is idle and reads its memory: the
// initial list of everything is when a controller's memory peaks.
func runStartup(ctx context.Context, cfg *config, e *env, res *results) error {
	if err := e.configstamp.stop(); err != nil {
		return err
	}
	from := time.Now()
	p, err := e.startConfigstamp(ctx, "configstamp-restart.log")
	if err != nil {
		return err
	}
	res.add(scStartup, "process start → /readyz 200 with "+e.inventory.String()+" present", fmtDuration(p.readyAfter))
	res.add(scStartup, "process start → leader lease held", fmtDuration(p.leaderAfter))
	if err := p.waitIdle(ctx, 5*time.Minute); err != nil {
		return err
	}
	res.add(scStartup, "process start → idle (queues empty)", fmtDuration(time.Since(p.started)))
	e.window(scStartup, from, time.Now())
	return res.addMemory(p, scStartup, "after restart and sync")
}
