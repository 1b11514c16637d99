package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// hostileScale is what one tenant writes in the hostile scenario.
type hostileScale struct {
	manyKeyObjects, keysEach  int // ConfigMaps with very many keys
	markedObjects, markedSize int // large ConfigMaps marked "configstamp.io/digested: sha256" by their author
	// goal: this is the scale (-full), which hostileGoal is for.
	goal bool
}

func hostileScaleFor(cfg *config) hostileScale {
	if cfg.full {
		return hostileScale{manyKeyObjects: 20, keysEach: 100000, markedObjects: 20, markedSize: 900 << 10, goal: true}
	}
	return hostileScale{manyKeyObjects: 5, keysEach: 20000, markedObjects: 5, markedSize: 900 << 10}
}

// runHostile measures configstamp's memory against one tenant's hostile
// ConfigMaps (issue 10: 20 ConfigMaps of 100,000 keys used to cost 11 MB each,
// and a user-set digested annotation kept 1 MiB whole), on a control plane of
// its own: configstamp running while they are created, then a fresh
// configstamp started after they exist (its initial list is the peak).
func runHostile(ctx context.Context, cfg *config, res *results) (err error) {
	sc := hostileScaleFor(cfg)
	e, err := startEnv(ctx, cfg, filepath.Join(cfg.outDir, "hostile"), false)
	if err != nil {
		return err
	}
	defer func() {
		if stopErr := e.stop(cfg.keep); err == nil {
			err = stopErr
		}
	}()
	p, err := e.startConfigstamp(ctx, "configstamp-hostile.log")
	if err != nil {
		return err
	}
	if err := p.waitIdle(ctx, time.Minute); err != nil {
		return err
	}
	before, _, err := p.heap()
	if err != nil {
		return err
	}
	idle, err := p.memory()
	if err != nil {
		return err
	}
	const ns = "hostile"
	if err := createObject(ctx, e.client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	// The heap probe's ConfigMap figure includes the informer's fixed cost: take
	// it once with only the namespaces' kube-root-ca.crt present.
	empty, err := probeCache(ctx, e, filepath.Join(cfg.outDir, "hostile-empty-cache-heap.pprof"))
	if err != nil {
		return fmt.Errorf("heap probe: %w", err)
	}
	began := time.Now()
	err = parallel(ctx, "many-key ConfigMaps", sc.manyKeyObjects, 2, func(ctx context.Context, i int) error {
		data := make(map[string]string, sc.keysEach)
		for k := range sc.keysEach {
			data[fmt.Sprintf("k%05d", k)] = fmt.Sprint(k % 10) // 7 bytes a key: 100,000 fit in 1 MiB
		}
		return createObject(ctx, e.client, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("many-%d", i)}, Data: data})
	})
	if err != nil {
		return err
	}
	big := strings.Repeat("x", sc.markedSize)
	err = parallel(ctx, "marked ConfigMaps", sc.markedObjects, 2, func(ctx context.Context, i int) error {
		return createObject(ctx, e.client, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("marked-%d", i),
			Annotations: map[string]string{"configstamp.io/digested": stamp.DigestedPerKey}}, Data: map[string]string{"k": big}})
	})
	if err != nil {
		return err
	}
	res.add(scHostile, "created", fmt.Sprintf("%d ConfigMaps of %d keys, %d of %s marked configstamp.io/digested by their author, in %s",
		sc.manyKeyObjects, sc.keysEach, sc.markedObjects, fmtBytes(uint64(sc.markedSize)), fmtDuration(time.Since(began))))
	if err := p.waitIdle(ctx, 2*time.Minute); err != nil {
		return err
	}
	if err := res.addMemory(p, scHostile, "after they were created, configstamp running"); err != nil {
		return err
	}
	after, _, err := p.heap()
	if err != nil {
		return err
	}
	if err := addHostileGrowth(p, res, sc, idle); err != nil {
		return err
	}
	n := sc.manyKeyObjects + sc.markedObjects
	res.add(scHostile, "Go heap in use, growth per hostile ConfigMap (configstamp running)", fmtBytes(uint64(max(0, after-before)/float64(n))))

	if err := p.stop(); err != nil {
		return err
	}
	p, err = e.startConfigstamp(ctx, "configstamp-hostile-restart.log")
	if err != nil {
		return err
	}
	if err := p.waitIdle(ctx, 2*time.Minute); err != nil {
		return err
	}
	if err := res.addMemory(p, scHostile, "fresh start with them present"); err != nil {
		return err
	}
	restarted, _, err := p.heap()
	if err != nil {
		return err
	}
	res.add(scHostile, "Go heap in use, fresh start, minus an idle empty-cluster start, per hostile ConfigMap (GC noise included)",
		fmtBytes(uint64(max(0, restarted-before)/float64(n))))
	r, err := probeCache(ctx, e, filepath.Join(cfg.outDir, "hostile-cache-heap.pprof"))
	if err != nil {
		return fmt.Errorf("heap probe: %w", err)
	}
	cms := func(r heapProbeResult) heapProbeKind {
		for _, k := range r.Kinds {
			if k.Kind == "v1.ConfigMap" {
				return k
			}
		}
		return heapProbeKind{}
	}
	full, base := cms(r), cms(empty)
	res.add(scHostile, fmt.Sprintf("live heap of the cached ConfigMaps (heap probe): %d kube-root-ca.crt alone / with the %d hostile ones", base.Objects, full.Objects-base.Objects),
		fmtBytes(uint64(max(0, base.Bytes)))+" / "+fmtBytes(uint64(max(0, full.Bytes))))
	res.notes = append(res.notes, "Hostile: the heap probe's ConfigMap figure includes the watch decoder's buffer, one per "+
		"informer and as large as the largest object (about 1.2 MiB here, see `go tool pprof -top "+
		filepath.Join(cfg.outDir, "hostile-cache-heap.pprof")+"`): a fixed cost, not one per object.")
	res.add(scHostile, "marginal live heap per cached hostile ConfigMap (heap probe, watch buffer included)",
		fmt.Sprintf("%.0f B", float64(full.Bytes-base.Bytes)/float64(max(1, full.Objects-base.Objects))))
	return nil
}

// hostileGoal is what the hostile ConfigMaps (20 of 100,000 keys, the
// -full scale, with as many large marked ones) may add to the peak RSS.
const hostileGoal = 16 << 20

// addHostileGrowth adds how much configstamp's peak RSS grew while the hostile
// ConfigMaps were created, from idle; at the -full scale with its goal.
func addHostileGrowth(p *configstampProcess, res *results, sc hostileScale, idle procMemory) error {
	now, err := p.memory()
	if err != nil {
		return err
	}
	growth := now.hwm - min(idle.hwm, now.hwm)
	figure := fmt.Sprintf("peak RSS growth from idle, %d ConfigMaps of %d keys + %d marked", sc.manyKeyObjects, sc.keysEach, sc.markedObjects)
	if sc.goal {
		res.goal(scHostile, figure, fmtBytes(growth), "< "+fmtBytes(hostileGoal), growth < hostileGoal)
		return nil
	}
	res.add(scHostile, figure+" (the goal is for -full)", fmtBytes(growth))
	return nil
}
