package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// heapProbeCommand is the hidden sub-command that holds configstamp's cache.
//
// It builds the cache exactly as configstamp does (controllers.CacheOptions:
// digest transforms, managedFields stripped; controllers.SetupIndexes) and
// starts its informers one kind at a time. After each kind has synced it
// collects garbage twice and reads the live heap (HeapAlloc), so the growth
// divided by the kind's object count is the marginal memory of one cached
// object of that kind, indexes included. It then writes a heap profile. It
// shows what the cache costs, not the reconciler's or the webhook's transient
// memory (configstamp's own --pprof-bind-address serves that).
const heapProbeCommand = "heap-probe"

type heapProbeKind struct {
	Kind    string `json:"kind"`
	Objects int    `json:"objects"`
	Bytes   int64  `json:"bytes"` // live heap growth while this kind synced
}

type heapProbeResult struct {
	HWM       uint64          `json:"hwm"`
	RSS       uint64          `json:"rss"`
	HeapInuse uint64          `json:"heapInuse"`
	HeapAlloc uint64          `json:"heapAlloc"`
	Objects   int             `json:"objects"`
	Kinds     []heapProbeKind `json:"kinds"`
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// deferredIndex is one recorded IndexField call.
type deferredIndex struct {
	obj   client.Object
	field string
	fn    client.IndexerFunc
}

// deferredIndexes records IndexField calls to apply them kind by kind later.
type deferredIndexes []deferredIndex

func (d *deferredIndexes) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	*d = append(*d, deferredIndex{obj, field, fn})
	return nil
}

func (d *deferredIndexes) apply(ctx context.Context, to client.FieldIndexer, kind client.Object) error {
	for _, i := range *d {
		if reflect.TypeOf(i.obj) == reflect.TypeOf(kind) {
			if err := to.IndexField(ctx, i.obj, i.field, i.fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// count returns how many objects of a kind the cache holds; the list it reads
// (a copy of every object's struct) is garbage when it returns.
func count(ctx context.Context, c client.Reader, newList func() client.ObjectList) (int, error) {
	list := newList()
	if err := c.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	return meta.LenList(list), nil
}

func heapProbe(args []string) error {
	runtime.MemProfileRate = 4 << 10 // finer than the default 512 KiB: the heap is small
	fs := flag.NewFlagSet(heapProbeCommand, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "admin kubeconfig")
	out := fs.String("out", "heap.pprof", "heap profile to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = benchUserAgent + "-heap-probe"
	cfg.QPS, cfg.Burst = 300, 600 // configstamp's defaults
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	opts := controllers.CacheOptions(nil, nil, false)
	opts.Scheme = scheme
	cache, err := ctrlcache.New(cfg, opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The indexes are registered per kind, right after its informer starts
	// (an informer re-indexes what it holds), so each kind's figure includes
	// its own indexes.
	var idx deferredIndexes
	if err := controllers.SetupIndexes(ctx, &idx, nil); err != nil {
		return err
	}
	// Namespaces first: the first informer also pays for discovery and the
	// REST mapper, which the per-kind figures must not include.
	kinds := []struct {
		obj  client.Object
		list func() client.ObjectList
	}{
		{&corev1.Namespace{}, func() client.ObjectList { return &corev1.NamespaceList{} }},
		{&corev1.ConfigMap{}, func() client.ObjectList { return &corev1.ConfigMapList{} }},
		{&corev1.Secret{}, func() client.ObjectList { return &corev1.SecretList{} }},
		{&appsv1.Deployment{}, func() client.ObjectList { return &appsv1.DeploymentList{} }},
		{&appsv1.StatefulSet{}, func() client.ObjectList { return &appsv1.StatefulSetList{} }},
		{&appsv1.DaemonSet{}, func() client.ObjectList { return &appsv1.DaemonSetList{} }},
	}
	go func() { _ = cache.Start(ctx) }()
	if !cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not start")
	}
	var r heapProbeResult
	before := liveHeap()
	for _, k := range kinds {
		if _, err := cache.GetInformer(ctx, k.obj); err != nil {
			return err
		}
		if !cache.WaitForCacheSync(ctx) {
			return fmt.Errorf("cache did not sync")
		}
		if err := idx.apply(ctx, cache, k.obj); err != nil {
			return err
		}
		n, err := count(ctx, cache, k.list)
		if err != nil {
			return err
		}
		after := liveHeap()
		r.Kinds = append(r.Kinds, heapProbeKind{Kind: fmt.Sprintf("%T", k.obj)[1:], Objects: n, Bytes: int64(after) - int64(before)})
		r.Objects += n
		before = after
	}
	// The SnapshotKeeper's cache (--pin): the metadata of the snapshots only.
	snapOpts := controllers.SnapshotCacheOptions(nil)
	snapOpts.Scheme = scheme
	snapCache, err := ctrlcache.New(cfg, snapOpts)
	if err != nil {
		return err
	}
	go func() { _ = snapCache.Start(ctx) }()
	for _, kind := range []stamp.Kind{stamp.KindConfigMap, stamp.KindSecret} {
		obj := controllers.SnapshotMetadata(kind)
		if _, err := snapCache.GetInformer(ctx, obj); err != nil {
			return err
		}
		if !snapCache.WaitForCacheSync(ctx) {
			return fmt.Errorf("snapshot cache did not sync")
		}
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(obj.GroupVersionKind().GroupVersion().WithKind(string(kind) + "List"))
		if err := snapCache.List(ctx, list); err != nil {
			return err
		}
		after := liveHeap()
		r.Kinds = append(r.Kinds, heapProbeKind{Kind: string(kind) + " snapshot metadata (--pin)", Objects: len(list.Items), Bytes: int64(after) - int64(before)})
		r.Objects += len(list.Items)
		before = after
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapInuse, r.HeapAlloc = ms.HeapInuse, ms.HeapAlloc
	mem, err := readProcMemory(os.Getpid())
	if err != nil {
		return err
	}
	r.HWM, r.RSS = mem.hwm, mem.rss
	return json.NewEncoder(os.Stdout).Encode(r)
}

// runHeapProfile runs the probe against the main control plane (every object
// of the scenarios present) and adds `go tool pprof -top` of its heap.
func runHeapProfile(ctx context.Context, cfg *config, e *env, res *results) error {
	profile := filepath.Join(cfg.outDir, "cache-heap.pprof")
	r, err := probeCache(ctx, e, profile)
	if err != nil {
		return err
	}
	const scenario = "cache replica"
	res.add(scenario, fmt.Sprintf("live heap / heap in use holding configstamp's cache of %d objects (%s)", r.Objects, e.inventory),
		fmtBytes(r.HeapAlloc)+" / "+fmtBytes(r.HeapInuse))
	res.add(scenario, "live heap per cached object, all kinds", fmt.Sprintf("%.0f B", float64(r.HeapAlloc)/float64(r.Objects)))
	for _, k := range r.Kinds {
		if k.Objects == 0 || k.Kind == "v1.Namespace" {
			continue
		}
		res.add(scenario, fmt.Sprintf("marginal live heap per cached %s (%d objects, indexes included)", k.Kind, k.Objects),
			fmt.Sprintf("%.0f B", float64(k.Bytes)/float64(k.Objects)))
	}
	res.add(scenario, "peak RSS (VmHWM) / RSS of the replica", fmtBytes(r.HWM)+" / "+fmtBytes(r.RSS))
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-sample_index=inuse_space", "-nodecount=25", profile).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go tool pprof: %w: %s", err, top)
	}
	cum, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", "-sample_index=inuse_space", "-nodecount=40", profile).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go tool pprof: %w: %s", err, cum)
	}
	res.sections = append(res.sections,
		section{"Heap of a cache replica (go tool pprof -top -sample_index=inuse_space " + profile + ")", trimPprof(string(top))},
		section{"Same, cumulative (-top -cum)", trimPprof(string(cum))})
	return nil
}

// probeCache runs the heap probe against e's control plane.
func probeCache(ctx context.Context, e *env, profile string) (heapProbeResult, error) {
	var r heapProbeResult
	self, err := os.Executable()
	if err != nil {
		return r, err
	}
	cmd := exec.CommandContext(ctx, self, heapProbeCommand, "-kubeconfig="+e.cp.KubeconfigPath, "-out="+profile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return r, fmt.Errorf("%w: %s", err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return r, fmt.Errorf("reading the probe's result %q: %w", stdout.String(), err)
	}
	return r, nil
}

// trimPprof drops pprof's header lines about the file and build.
func trimPprof(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") || strings.HasPrefix(line, "Type:") || strings.HasPrefix(line, "Time:") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}
