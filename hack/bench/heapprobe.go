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
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers"
)

// heapProbeCommand is the hidden sub-command that holds configstamp's cache.
//
// configstamp has no pprof endpoint (cmd/main.go has no --pprof-bind-address),
// so the benchmark profiles a stand-in: a process that builds the cache exactly
// as configstamp does (controllers.CacheOptions: digest transforms, managedFields
// stripped; controllers.SetupIndexes) with informers for the same kinds,
// waits for it to sync and writes a heap profile. It shows what the cache
// costs, not the reconciler's or the webhook's transient memory.
const heapProbeCommand = "heap-probe"

type heapProbeResult struct {
	HWM       uint64 `json:"hwm"`
	RSS       uint64 `json:"rss"`
	HeapInuse uint64 `json:"heapInuse"`
	Objects   int    `json:"objects"`
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
	cfg.QPS, cfg.Burst = 50, 100 // configstamp's defaults
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	opts := controllers.CacheOptions()
	opts.Scheme = scheme
	cache, err := ctrlcache.New(cfg, opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := controllers.SetupIndexes(ctx, cache); err != nil {
		return err
	}
	kinds := []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}, &corev1.Namespace{},
		&appsv1.Deployment{}, &appsv1.StatefulSet{}, &appsv1.DaemonSet{}}
	for _, obj := range kinds {
		if _, err := cache.GetInformer(ctx, obj); err != nil {
			return err
		}
	}
	go func() { _ = cache.Start(ctx) }()
	if !cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}
	objects := 0
	for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.SecretList{}, &corev1.NamespaceList{},
		&appsv1.DeploymentList{}, &appsv1.StatefulSetList{}, &appsv1.DaemonSetList{}} {
		if err := cache.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		objects += meta.LenList(list)
	}
	runtime.GC()
	runtime.GC()
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
	mem, err := readProcMemory(os.Getpid())
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(heapProbeResult{HWM: mem.hwm, RSS: mem.rss, HeapInuse: ms.HeapInuse, Objects: objects})
}

// runHeapProfile runs the probe against the main control plane (every object
// of the scenarios present) and adds `go tool pprof -top` of its heap.
func runHeapProfile(ctx context.Context, cfg *config, e *env, res *results) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	profile := filepath.Join(cfg.outDir, "cache-heap.pprof")
	cmd := exec.CommandContext(ctx, self, heapProbeCommand, "-kubeconfig="+e.cp.KubeconfigPath, "-out="+profile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, stderr.String())
	}
	var r heapProbeResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return fmt.Errorf("reading the probe's result %q: %w", stdout.String(), err)
	}
	const scenario = "cache replica"
	res.add(scenario, fmt.Sprintf("heap in use holding configstamp's cache of %d objects (%s)", r.Objects, e.inventory), fmtBytes(r.HeapInuse))
	res.add(scenario, "heap in use per cached object", fmt.Sprintf("%.0f B", float64(r.HeapInuse)/float64(r.Objects)))
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
