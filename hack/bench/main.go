// Command bench measures configstamp against a real local control plane
// (test/localcp): memory against object count and data size, change-to-stamp
// latency, fan-out of one shared ConfigMap, webhook admission latency and
// start-up time. It prints one table and writes it to <out>/results.md, and
// as JSON to <out>/results.json.
//
//	go run ./hack/bench            # default scale, a few minutes on 2 cores
//	go run ./hack/bench -full      # the scale (10,000 + 10,000 × 10 KiB, 1,000 Deployments)
//	make bench BENCH_FLAGS=-full
//
// configstamp runs as a separate process (bin/configstamp, see -configstamp).
// Its API requests are counted from the API server's audit log by user agent.
// Nothing sleeps for synchronisation: every wait polls a condition with a
// deadline, and -timeout bounds the whole run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// config is what one run measures, from the flags.
type config struct {
	configstampBin  string
	floorManagerBin string
	outDir          string
	full            bool
	scale           bool
	namespaces      int
	configMaps      int
	secrets         int
	deployments     int
	size            int
	keys            int
	sweepCount      int
	sweepSizes      []int
	latencyChanges  int
	wave            int
	waveBudget      int
	waveWindow      time.Duration
	fanout          int
	webhookCreates  int
	webhookParallel int
	workers         int
	deployWorkers   int
	qps             float64
	etcdQuota       int64
	configstampArgs []string
	extraArgs       []string // -configstamp-args alone
	scenarios       map[string]bool
	timeout         time.Duration
	heapProfile     bool
	apiserverCPU    bool
	keep            bool
}

// Scenario names, for -scenarios.
const (
	scMemory  = "memory"
	scLatency = "latency"
	scFanout  = "fanout"
	scWebhook = "webhook"
	scStartup = "startup"
	scSweep   = "sweep"
	scHostile = "hostile"
	// scApplyWarnings: what --apply-warnings adds to a ConfigMap UPDATE (applywarnings.go).
	scApplyWarnings = "applywarnings"
	// scManyRefs: another tenant's admissions while one sends templates of 5,000 references (manyrefs.go).
	scManyRefs = "manyrefs"
	// scPin: the latency scenario with pinned config (pin.go).
	scPin = "pin"
	// scWave: a budgeted wave of rollouts with pods against its ideal (wave.go).
	scWave = "wave"
)

var allScenarios = []string{scMemory, scLatency, scPin, scFanout, scWebhook, scManyRefs, scWave, scStartup, scSweep, scHostile, scApplyWarnings}

// rolloutFlags switch off configstamp's deliberate delays (see the notes
// printed with the results), and the canary: the scenarios' Deployments
// have no replicas, so none can be a change's canary, and a change to
// workloads that make no pod waits, unstamped, for one that does
// (docs/rollout-safety.md). The wave scenario, with pods, keeps it.
var rolloutFlags = []string{"--max-concurrent-rollouts=0", "--debounce=0", "--canary=false"}

func main() {
	if len(os.Args) > 1 && os.Args[1] == heapProbeCommand {
		if err := heapProbe(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench "+heapProbeCommand+":", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			fmt.Fprintf(os.Stderr, "bench: the whole run is bounded by -timeout=%s\n", cfg.timeout)
		}
		os.Exit(1)
	}
}

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	cfg := &config{}
	var size, sweepSizes, quota, extra, scenarios string
	fs.StringVar(&cfg.configstampBin, "configstamp", "", "configstamp binary (default: $CONFIGSTAMP_BIN/configstamp, else bin/configstamp of the repository)")
	fs.StringVar(&cfg.floorManagerBin, "floor-manager", "", "a built hack/bench/floormanager (default: built into -out at the start of the memory scenario)")
	fs.StringVar(&cfg.outDir, "out", "_output/bench", "directory for results.md, logs and the control plane state")
	fs.BoolVar(&cfg.full, "full", false, "the issue's scale for the memory scenario: 10,000 ConfigMaps + 10,000 Secrets, 1,000 Deployments (explicit flags still win)")
	fs.BoolVar(&cfg.scale, "scale", false, "10x the default fixture: 100 namespaces, 10,000 ConfigMaps + 10,000 Secrets, 5,000 Deployments, a fan-out of 1,000 (explicit flags still win)")
	fs.IntVar(&cfg.namespaces, "namespaces", 10, "memory scenario: namespaces")
	fs.IntVar(&cfg.configMaps, "configmaps", 2000, "memory scenario: ConfigMaps, one per Deployment first (-full: 10000)")
	fs.IntVar(&cfg.secrets, "secrets", 2000, "memory scenario: Secrets, one per Deployment first (-full: 10000)")
	fs.IntVar(&cfg.deployments, "deployments", 500, "memory scenario: opted-in Deployments (-full: 1000); also used by the sweep")
	fs.StringVar(&size, "size", "10Ki", "data size of each ConfigMap and Secret (memory, latency, fan-out, webhook)")
	fs.IntVar(&cfg.keys, "keys", 4, "keys per ConfigMap/Secret; the size is split evenly between them")
	fs.IntVar(&cfg.sweepCount, "sweep-count", 4000, "size sweep: ConfigMaps and as many Secrets per size (lower it for a quick run)")
	fs.StringVar(&sweepSizes, "sweep-sizes", "1Ki,10Ki,50Ki", "size sweep: data sizes, comma-separated")
	fs.IntVar(&cfg.latencyChanges, "latency-changes", 100, "latency: sequential changes, each to its own ConfigMap and Deployment")
	fs.IntVar(&cfg.fanout, "fanout", 1000, "fan-out: Deployments sharing one ConfigMap")
	fs.IntVar(&cfg.wave, "wave", 100, "wave: Deployments of one pod sharing one ConfigMap (-scale: 1000)")
	fs.IntVar(&cfg.waveBudget, "wave-budget", 10, "wave: --max-concurrent-rollouts (-scale: 50)")
	fs.DurationVar(&cfg.waveWindow, "wave-verify-window", 5*time.Second, "wave: --verify-window; a rollout holds its slot until it is verified (kwok's pods never crash: the window is pure hold)")
	fs.IntVar(&cfg.webhookCreates, "webhook-creates", 200, "webhook: Deployment creations")
	fs.IntVar(&cfg.webhookParallel, "webhook-parallel", 20, "webhook: creations in flight at once")
	fs.IntVar(&cfg.workers, "workers", 32, "parallel creations of ConfigMaps and Secrets")
	fs.IntVar(&cfg.deployWorkers, "deploy-workers", 16, "parallel creations of Deployments (each passes configstamp's webhook)")
	fs.Float64Var(&cfg.qps, "qps", 2000, "the benchmark's own client QPS (burst: twice)")
	fs.StringVar(&quota, "etcd-quota", "8Gi", "etcd --quota-backend-bytes")
	fs.StringVar(&extra, "configstamp-args", "", "extra configstamp flags, space-separated (appended after "+strings.Join(rolloutFlags, " ")+")")
	fs.StringVar(&scenarios, "scenarios", strings.Join(allScenarios, ","), "scenarios to run, comma-separated")
	fs.DurationVar(&cfg.timeout, "timeout", 40*time.Minute, "bound on the whole run")
	fs.BoolVar(&cfg.apiserverCPU, "apiserver-profile", false, "fan-out: write kube-apiserver's CPU profile of the fan-out and of its floor (4 s each from their start) to apiserver-fanout.pprof and apiserver-floor.pprof in -out")
	fs.BoolVar(&cfg.heapProfile, "heap-profile", true, "after the main scenarios, profile the heap of a process holding configstamp's cache (same transforms and indexes) over the same objects")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the control planes' state directories")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.scale {
		for name, v := range map[string]*int{"namespaces": &cfg.namespaces, "configmaps": &cfg.configMaps, "secrets": &cfg.secrets,
			"deployments": &cfg.deployments, "fanout": &cfg.fanout, "wave": &cfg.wave, "wave-budget": &cfg.waveBudget} {
			if !set[name] {
				*v = map[string]int{"namespaces": 100, "configmaps": 10000, "secrets": 10000, "deployments": 5000, "fanout": 1000,
					"wave": 1000, "wave-budget": 50}[name]
			}
		}
	}
	if cfg.full {
		for name, v := range map[string]*int{"configmaps": &cfg.configMaps, "secrets": &cfg.secrets} {
			if !set[name] {
				*v = 10000
			}
		}
		if !set["deployments"] {
			cfg.deployments = 1000
		}
	}
	var err error
	if cfg.size, err = parseBytes(size); err != nil {
		return nil, fmt.Errorf("-size: %w", err)
	}
	for _, s := range strings.Split(sweepSizes, ",") {
		n, err := parseBytes(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("-sweep-sizes: %w", err)
		}
		cfg.sweepSizes = append(cfg.sweepSizes, n)
	}
	q, err := parseBytes(quota)
	if err != nil {
		return nil, fmt.Errorf("-etcd-quota: %w", err)
	}
	cfg.etcdQuota = int64(q)
	cfg.extraArgs = strings.Fields(extra)
	cfg.configstampArgs = append(append([]string{}, rolloutFlags...), cfg.extraArgs...)
	cfg.scenarios = map[string]bool{}
	for _, s := range strings.Split(scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		known := false
		for _, k := range allScenarios {
			known = known || k == s
		}
		if !known {
			return nil, fmt.Errorf("-scenarios: unknown %q (known: %s)", s, strings.Join(allScenarios, ","))
		}
		cfg.scenarios[s] = true
	}
	switch {
	case cfg.namespaces < 1 || cfg.keys < 1 || cfg.size < cfg.keys:
		return nil, errors.New("need at least one namespace, one key and one byte per key")
	case cfg.deployments > cfg.configMaps || cfg.deployments > cfg.secrets:
		return nil, errors.New("-deployments must not exceed -configmaps or -secrets (each Deployment has its own)")
	case cfg.workers < 1 || cfg.deployWorkers < 1 || cfg.webhookParallel < 1:
		return nil, errors.New("worker counts must be positive")
	}
	if cfg.configstampBin == "" {
		bin, err := defaultBinDir()
		if err != nil {
			return nil, err
		}
		cfg.configstampBin = filepath.Join(bin, "configstamp")
	}
	if _, err := os.Stat(cfg.configstampBin); err != nil {
		return nil, fmt.Errorf(`configstamp binary: %w (run "make build")`, err)
	}
	if cfg.outDir, err = filepath.Abs(cfg.outDir); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseBytes reads 10Ki, 10KiB, 8Gi or a plain number of bytes.
func parseBytes(s string) (int, error) {
	q, err := resource.ParseQuantity(strings.TrimSuffix(s, "B"))
	if err != nil {
		return 0, err
	}
	v, ok := q.AsInt64()
	if !ok || v <= 0 {
		return 0, fmt.Errorf("%q is not a positive number of bytes", s)
	}
	return int(v), nil
}

// defaultBinDir is $CONFIGSTAMP_BIN or bin/ at the repository root.
func defaultBinDir() (string, error) {
	if d := os.Getenv("CONFIGSTAMP_BIN"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(data), "module github.com/configstamp/configstamp\n") {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root not found; pass -configstamp")
		}
		dir = parent
	}
}

func run(ctx context.Context, cfg *config) error {
	began := time.Now()
	if err := os.MkdirAll(cfg.outDir, 0o755); err != nil {
		return err
	}
	res := &results{}
	res.notes = append(res.notes, scaleNotes(cfg)...)
	res.notes = append(res.notes, provenance(cfg.configstampBin))
	needMain := cfg.scenarios[scMemory] || cfg.scenarios[scLatency] || cfg.scenarios[scPin] || cfg.scenarios[scFanout] ||
		cfg.scenarios[scWebhook] || cfg.scenarios[scManyRefs] || cfg.scenarios[scStartup] || cfg.scenarios[scWave]
	if needMain {
		if err := runMain(ctx, cfg, res); err != nil {
			return err
		}
	}
	if cfg.scenarios[scSweep] {
		if err := runSweep(ctx, cfg, res); err != nil {
			return err
		}
	}
	if cfg.scenarios[scHostile] {
		logf("== scenario %s", scHostile)
		if err := runHostile(ctx, cfg, res); err != nil {
			return fmt.Errorf("scenario %s: %w", scHostile, err)
		}
	}
	if cfg.scenarios[scApplyWarnings] {
		logf("== scenario %s", scApplyWarnings)
		if err := runApplyWarnings(ctx, cfg, res); err != nil {
			return fmt.Errorf("scenario %s: %w", scApplyWarnings, err)
		}
	}
	res.notes = append(res.notes, fmt.Sprintf("Whole run: %s.", time.Since(began).Round(time.Second)))
	out := res.markdown()
	fmt.Println()
	fmt.Print(out)
	path := filepath.Join(cfg.outDir, "results.md")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		return err
	}
	table, err := res.json()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.outDir, "results.json"), table, 0o644); err != nil {
		return err
	}
	logf("results written to %s and results.json", path)
	return nil
}

// runMain runs the scenarios that share one full control plane and one
// configstamp process (restarted only by the start-up scenario).
func runMain(ctx context.Context, cfg *config, res *results) (err error) {
	e, err := startEnv(ctx, cfg, filepath.Join(cfg.outDir, "cluster"), true)
	if err != nil {
		return err
	}
	defer func() {
		if stopErr := e.stop(cfg.keep); err == nil {
			err = stopErr
		}
	}()
	cs, err := e.startConfigstamp(ctx, "configstamp.log")
	if err != nil {
		return err
	}
	res.add("setup", "configstamp start to /readyz, empty cluster", fmtDuration(cs.readyAfter))
	if err := cs.waitIdle(ctx, time.Minute); err != nil {
		return err
	}
	e.window("setup", cs.started, time.Now())
	if err := res.addMemory(cs, "setup", "idle in an empty cluster"); err != nil {
		return err
	}

	steps := []struct {
		name string
		fn   func(context.Context, *config, *env, *results) error
	}{
		{scMemory, runMemory},
		{scLatency, runLatency},
		{scPin, runPin},
		{scFanout, runFanout},
		{scWebhook, runWebhook},
		{scManyRefs, runManyRefs},
		{scWave, runWave},
	}
	for _, s := range steps {
		if !cfg.scenarios[s.name] {
			continue
		}
		logf("== scenario %s", s.name)
		if err := s.fn(ctx, cfg, e, res); err != nil {
			return fmt.Errorf("scenario %s: %w (configstamp log: %s)", s.name, err, e.configstamp.logPath)
		}
	}
	if err := e.configstamp.waitIdle(ctx, 2*time.Minute); err != nil {
		return err
	}
	if err := res.addMemory(e.configstamp, "end", "after all scenarios, first process"); err != nil {
		return err
	}
	if cfg.scenarios[scStartup] {
		logf("== scenario %s", scStartup)
		if err := runStartup(ctx, cfg, e, res); err != nil {
			return fmt.Errorf("scenario %s: %w", scStartup, err)
		}
	}
	if cfg.heapProfile {
		logf("== heap profile of a cache replica")
		if err := runHeapProfile(ctx, cfg, e, res); err != nil {
			return fmt.Errorf("heap profile: %w", err)
		}
	}
	if err := e.configstamp.stop(); err != nil {
		return err
	}
	if err := e.finishAudit(ctx, res); err != nil {
		return err
	}
	if size, err := e.etcdDBSize(); err == nil {
		res.add("end", "etcd database file (quota "+fmtBytes(uint64(cfg.etcdQuota))+")", fmtBytes(uint64(size)))
	}
	return nil
}

func scaleNotes(cfg *config) []string {
	scale := "default scale"
	if cfg.full {
		scale = "the issue's scale (-full)"
	}
	if cfg.scale {
		scale = "10x the default (-scale)"
	}
	return []string{
		fmt.Sprintf("Scale: %s. Memory scenario: %d namespaces, %d ConfigMaps + %d Secrets of %s each (%d keys) plus 10 shared ConfigMaps per namespace, "+
			"%d opted-in Deployments. Size sweep: %d ConfigMaps + %d Secrets at %s with %d Deployments. Latency: %d changes. Fan-out: %d Deployments. "+
			"Webhook: %d creations, %d at a time.",
			scale, cfg.namespaces, cfg.configMaps, cfg.secrets, fmtBytes(uint64(cfg.size)), cfg.keys, cfg.deployments,
			cfg.sweepCount, cfg.sweepCount, joinSizes(cfg.sweepSizes), min(cfg.deployments, cfg.sweepCount),
			cfg.latencyChanges, cfg.fanout, cfg.webhookCreates, cfg.webhookParallel),
		"Every Deployment mounts its own ConfigMap (volume), takes its own Secret (envFrom) and one key of a shared ConfigMap (configMapKeyRef).",
		"configstamp runs as its own process with " + strings.Join(cfg.configstampArgs, " ") + ": the rollout budget would hold rollouts back " +
			"and the default 2 s debounce would add 2 s to every change; both are deliberate delays, switched off so that the figures are " +
			"configstamp's own latency and fan-out. --halt-on-failure stays on (default), so each rollout is still followed to completion " +
			"(from the status: no further request). Client QPS and concurrency are configstamp's defaults.",
		"Deployments have replicas 0: the Deployment controller still makes a ReplicaSet per rollout and reports it complete, " +
			"but no pods are scheduled, so kube-scheduler and kwok stay idle on this machine. configstamp does the same work as with pods.",
		"RSS figures are VmHWM (peak) and VmRSS (current) from /proc/PID/status; heap figures are go_memstats_heap_inuse_bytes " +
			"(live objects and garbage not yet collected) and go_memstats_next_gc_bytes (the GC's goal: twice the live heap at the last GC, GOGC=100) from configstamp's /metrics.",
		"Request counts come from the kube-apiserver audit log (level Metadata, stage ResponseComplete, userAgent starting with \"configstamp\"), " +
			"attributed to a scenario by requestReceivedTimestamp. \"watchlist\" is a WATCH with sendInitialEvents=true (a streaming initial list).",
	}
}

// provenance says which configstamp was measured: the binary's time and the
// repository's HEAD, and whether Go files differed from it (the binary is built
// from the working tree).
func provenance(bin string) string {
	note := "configstamp binary: " + bin
	if fi, err := os.Stat(bin); err == nil {
		note += ", built " + fi.ModTime().Format(time.RFC3339)
	}
	head, err := exec.Command("git", "log", "-1", "--format=%h %s").Output()
	if err != nil {
		return note + "."
	}
	note += "; repository HEAD " + strings.TrimSpace(string(head))
	if dirty, err := exec.Command("git", "status", "--porcelain", "--", "*.go", ":!hack/bench").Output(); err == nil && len(dirty) > 0 {
		note += " (with uncommitted Go changes)"
	}
	return note + "."
}

func joinSizes(sizes []int) string {
	parts := make([]string, len(sizes))
	for i, s := range sizes {
		parts[i] = fmtBytes(uint64(s))
	}
	return strings.Join(parts, ", ")
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
}
