package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	ratelimit "golang.org/x/time/rate"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// runFanout changes the one ConfigMap key that every Deployment of a namespace
// references and times until every template carries a new stamp.
func runFanout(ctx context.Context, cfg *config, e *env, res *results) error {
	const ns = "bench-fanout"
	n := cfg.fanout
	f := &fixture{namespaces: []string{ns}, configMaps: n, secrets: n, shared: 1, deployments: n, size: cfg.size, keys: cfg.keys}
	if err := f.setup(ctx, e, cfg); err != nil {
		return err
	}
	w, err := watchStamps(ctx, e, ns)
	if err != nil {
		return err
	}
	defer w.stop()
	names := make([]string, n)
	for i := range names {
		names[i] = f.deploymentName(i)
	}
	failOpenBefore, err := e.webhookFailOpen(ctx)
	if err != nil {
		return err
	}
	hookBefore, err := e.configstamp.webhookLatency()
	if err != nil {
		return err
	}
	before := w.stamps()
	cpuBefore := e.cpuTimes()
	from := time.Now()
	profiled := e.profileAPIServer(ctx, "apiserver-fanout.pprof")
	answered, err := f.updateConfigMap(ctx, e, ns, f.sharedName(0), "v2")
	if err != nil {
		return err
	}
	seen, err := w.waitChanged(ctx, before, names, 10*time.Minute)
	if err != nil {
		return err
	}
	if err := <-profiled; err != nil {
		return err
	}
	cpuAfter, cpuAt := e.cpuTimes(), time.Now()
	var delays []time.Duration
	last := answered
	for _, at := range seen {
		delays = append(delays, at.Sub(answered))
		if at.After(last) {
			last = at
		}
	}
	slices.Sort(delays)
	e.windowPer("fan-out: change → last restamp", from, last.Add(time.Microsecond), n, "Deployment")
	res.add(scFanout, fmt.Sprintf("shared ConfigMap Update response → all %d templates restamped", n), fmtDuration(last.Sub(answered)))
	res.addDurations(scFanout, "Update response → each template restamped", delays)
	res.add(scFanout, "restamp throughput", fmt.Sprintf("%.0f Deployments/s", float64(n)/last.Sub(answered).Seconds()))
	res.addCPU(scFanout, "change → all templates restamped", cpuBefore, cpuAfter, cpuAt.Sub(from))

	if err := f.waitSettled(ctx, e, 10*time.Minute); err != nil {
		return err
	}
	settled := time.Now()
	e.windowPer("fan-out: change → rollouts complete, idle", from, settled, n, "Deployment")
	res.add(scFanout, "Update response → rollouts followed to completion, configstamp idle", fmtDuration(settled.Sub(answered)))
	hookAfter, err := e.configstamp.webhookLatency()
	if err != nil {
		return err
	}
	hook := hookAfter.minus(hookBefore)
	res.add(scFanout, "configstamp's own webhook handling time, mean (its histogram has decade buckets)",
		fmt.Sprintf("%s (n=%.0f; %s)", fmtSeconds(hook.mean()), hook.count, hook.bucketsText()))
	failOpenAfter, err := e.webhookFailOpen(ctx)
	if err != nil {
		return err
	}
	res.add(scFanout, "webhook calls failed open (timeout/error, API server counter)", fmt.Sprintf("%.0f", failOpenAfter-failOpenBefore))

	f, floor, err := fanoutFloor(ctx, cfg, e, n, res)
	if err != nil {
		return err
	}
	res.add(scFanout, fmt.Sprintf("the floor: a bare client patching %d such templates (not opted in), %d at a time, %d QPS", n, fanoutWorkers, fanoutQPS),
		fmtDuration(floor))
	ratio := last.Sub(answered).Seconds() / floor.Seconds()
	res.goal(scFanout, "all templates restamped / the floor", fmt.Sprintf("%.2fx", ratio), "<= 1.2x", ratio <= 1.2)
	obliged, err := fanoutFloorObliged(ctx, e, f, res)
	if err != nil {
		return err
	}
	res.add(scFanout, fmt.Sprintf("the floor with configstamp's obligations: the same %d patches each through a no-op webhook and followed by one event", n),
		fmtDuration(obliged))
	res.add(scFanout, "all templates restamped / the floor with configstamp's obligations", fmt.Sprintf("%.2fx", last.Sub(answered).Seconds()/obliged.Seconds()))
	return nil
}

// fanoutFloorObliged patches the floor's Deployments (f) again, each through a
// no-op mutating webhook registered for UPDATE and followed by one Event
// about it: what the fan-out costs any implementation that keeps
// configstamp's promises (the webhook's consistent check of every stamp, a
// ConfigChanged event per workload) without configstamp's own work.
func fanoutFloorObliged(ctx context.Context, e *env, f *fixture, res *results) (time.Duration, error) {
	stop, err := noopWebhook(ctx, e, admissionregistrationv1.Create, admissionregistrationv1.Update)
	if err != nil {
		return 0, err
	}
	defer stop()
	return floorPatches(ctx, e, f, "v3", true, "the floor's patches with configstamp's obligations", res)
}

// floorPatches sets the bench's annotation on the pod template of each of f's
// Deployments to value, with configstamp's concurrency and client rate, and
// returns how long that took (first request to last response). With events,
// each patch is followed by one Event about the Deployment, on a client rate
// of its own (configstamp's event recorder has a client of its own). It adds
// the CPU time of that window as what.
func floorPatches(ctx context.Context, e *env, f *fixture, value string, events bool, what string, res *results) (time.Duration, error) {
	limit, eventLimit := ratelimit.NewLimiter(fanoutQPS, fanoutBurst), ratelimit.NewLimiter(fanoutQPS, fanoutBurst)
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"template":{"metadata":{"annotations":{"bench.example/stamp":"`+value+`"}}}}}`))
	cpuBefore := e.cpuTimes()
	began := time.Now()
	err := parallel(ctx, what, f.deployments, fanoutWorkers, func(ctx context.Context, i int) error {
		if err := limit.Wait(ctx); err != nil {
			return err
		}
		d := f.deployment(i)
		if err := e.client.Patch(ctx, d, patch); err != nil || !events {
			return err
		}
		if err := eventLimit.Wait(ctx); err != nil {
			return err
		}
		return e.client.Create(ctx, floorEvent(d, value))
	})
	took := time.Since(began)
	res.addCPU(scFanout, what, cpuBefore, e.cpuTimes(), took)
	return took, err
}

// floorEvent is an Event about d like configstamp's ConfigChanged.
func floorEvent(d client.Object, value string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.GetNamespace(), Name: fmt.Sprintf("%s.%x", d.GetName(), time.Now().UnixNano())},
		EventTime:  metav1.NowMicro(), ReportingController: "bench.example/floor", ReportingInstance: "bench",
		Action: "Rollout", Reason: "ConfigChanged", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: d.GetNamespace(), Name: d.GetName(), UID: d.GetUID()},
		Note:      "ConfigMap/shared changed: pod template stamped with bench.example/stamp=" + value,
	}
}

// configstamp's defaults for its fan-out: --max-concurrent-reconciles and
// --kube-api-qps / --kube-api-burst.
const (
	fanoutWorkers = 32
	fanoutQPS     = 300
	fanoutBurst   = 600
)

// fanoutFloor creates n Deployments like the fan-out's, not opted in (so no
// webhook sees them), then patches one annotation of each pod template with
// configstamp's concurrency and client rate (floorPatches): what the same
// fan-out costs the API server without configstamp's work. It returns the
// floor's Deployments and how long the patches took.
func fanoutFloor(ctx context.Context, cfg *config, e *env, n int, res *results) (*fixture, time.Duration, error) {
	f := &fixture{namespaces: []string{"bench-fanout-floor"}, configMaps: n, secrets: n, shared: 1, deployments: n,
		size: cfg.size, keys: cfg.keys, noop: true}
	if _, err := f.createSources(ctx, e, cfg.workers); err != nil {
		return nil, 0, err
	}
	if _, err := f.createDeployments(ctx, e, cfg.deployWorkers); err != nil {
		return nil, 0, err
	}
	profiled := e.profileAPIServer(ctx, "apiserver-floor.pprof")
	took, err := floorPatches(ctx, e, f, "v2", false, "the floor's patches", res)
	return f, took, errors.Join(err, <-profiled)
}

// profileAPIServer starts a 4 s CPU profile of kube-apiserver (with
// -apiserver-profile) and writes it to name in the output directory; the
// channel gives its error once written. Without the flag it gives nil at once.
func (e *env) profileAPIServer(ctx context.Context, name string) <-chan error {
	done := make(chan error, 1)
	if !e.cfg.apiserverCPU {
		done <- nil
		return done
	}
	go func() {
		b, err := e.clientset.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "4").DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(filepath.Join(e.cfg.outDir, name), b, 0o644)
			logf("kube-apiserver CPU profile: go tool pprof -top %s", filepath.Join(e.cfg.outDir, name))
		}
		done <- err
	}()
	return done
}
