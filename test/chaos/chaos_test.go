// Package chaos proves exactly-once rollouts through the faults of a real
// control plane. configstamp runs as two replicas behind one webhook URL (a
// loopback balancer, like a Service), with leader election on short lease
// timings. A wave — one change to a ConfigMap shared by Deployments,
// StatefulSets and a DaemonSet, with a budget of concurrent rollouts — is
// under way when a fault is injected. The suite then counts, per workload, the
// ReplicaSets or ControllerRevisions made and compares them with what the
// changes require: lost (required and missing), duplicate (more than
// required), surprise (a rollout nothing required). Every count must be 0.
//
// `make test` runs each fault once; `make chaos` runs -chaos.reps of each in a
// random order and prints one table.
package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/configstamp/configstamp/test/framework"
)

var (
	reps = flag.Int("chaos.reps", 1, "repetitions of each fault")
	seed = flag.Uint64("chaos.seed", 0, "seed of the random fault order (0: from the clock)")
	only = flag.String("chaos.faults", "", "run only the faults whose names contain one of these comma-separated words (default: all)")
)

var env *framework.Env

// A budget of 2 stretches the wave over several seconds, so a fault lands
// mid-wave; leader election on short timings, so that a hand-off takes seconds.
var replicaArgs = []string{
	"--max-concurrent-rollouts=2", "--debounce=1s", "--progress-deadline=3m",
	"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(framework.Main(m, &env, framework.Config{Plane: framework.Kwok, Replicas: 2, Args: replicaArgs, AuditLog: true}))
}

// fault is one way for a wave to go wrong.
type fault struct {
	name string
	// prepare runs before the change (setup the fault needs).
	prepare func(t *testing.T, r *run)
	// inject runs once the wave is under way.
	inject func(t *testing.T, r *run)
	// restore undoes what inject left behind, once the counts are taken.
	restore func(t *testing.T, r *run)
	// custom replaces the shared change: the fault makes its own changes and
	// says what they require.
	custom func(t *testing.T, r *run)
}

// row is one line of the results table.
type row struct {
	fault                                       string
	workloads, required, seen, lost, dup, surpr int
	failOpen                                    float64
	converge                                    time.Duration
}

func faults() []fault {
	return []fault{
		{name: "leader SIGKILL", inject: killLeader, restore: restartKilled},
		{name: "leader cut off from the API server", inject: cutLeader, restore: onlyTheLeaderWrote},
		{name: "kube-apiserver SIGKILL+restart", inject: crashAPIServer},
		{name: "etcd compaction+defrag", inject: compactEtcd},
		{name: "webhook outage (both replicas down)", custom: webhookOutage},
		{name: "namespace deleted mid-wave", prepare: prepareDoomed, inject: deleteDoomed},
		{name: "node added and node drained", inject: nodeChurn, restore: undoNodeChurn},
		{name: "another writer every 200ms", inject: startWriter},
	}
}

func TestFaults(t *testing.T) {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(s, s))
	var chosen []fault
	for _, f := range faults() {
		if *only == "" || slices.ContainsFunc(strings.Split(*only, ","), func(w string) bool { return strings.Contains(f.name, w) }) {
			chosen = append(chosen, f)
		}
	}
	var order []fault
	for range *reps {
		order = append(order, chosen...)
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	t.Logf("%d runs, seed %d", len(order), s)

	w := newWave(t, "chaos", 24)
	sup := supervise(t)
	var rows []row
	for i, f := range order {
		ok := t.Run(fmt.Sprintf("%02d %s", i, f.name), func(t *testing.T) {
			r := &run{wave: w, fault: f, index: i, sup: sup}
			rows = append(rows, r.do(t))
		})
		if !ok {
			break // a broken run leaves the cluster in no state to judge the next
		}
	}
	report(t, rows)
}

// report logs the table, one row per fault with the runs added up.
func report(t *testing.T, rows []row) {
	t.Helper()
	byFault := map[string]*row{}
	runs := map[string]int{}
	var names []string
	for _, r := range rows {
		agg, ok := byFault[r.fault]
		if !ok {
			agg = &row{fault: r.fault}
			byFault[r.fault] = agg
			names = append(names, r.fault)
		}
		runs[r.fault]++
		agg.workloads = max(agg.workloads, r.workloads)
		agg.required += r.required
		agg.seen += r.seen
		agg.lost += r.lost
		agg.dup += r.dup
		agg.surpr += r.surpr
		agg.failOpen += r.failOpen
		agg.converge = max(agg.converge, r.converge)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| fault | reps | workloads | rollouts required | seen | lost | duplicate | surprise | fail-open admissions | converged (max) |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range names {
		r := byFault[n]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %.0f | %v |\n", n, runs[n], r.workloads, r.required, r.seen,
			r.lost, r.dup, r.surpr, r.failOpen, r.converge.Round(100*time.Millisecond))
	}
	t.Log(b.String())
	if dir := os.Getenv("CHAOS_RESULTS"); dir != "" {
		if err := os.WriteFile(dir, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// supervisor restarts replicas that exit by themselves (a lost leader
// election ends the process, as in a cluster, where the kubelet restarts the
// container), but not those a fault killed on purpose.
type supervisor struct {
	mu     sync.Mutex
	killed map[*framework.Process]bool
}

func supervise(t *testing.T) *supervisor {
	s := &supervisor{killed: map[*framework.Process]bool{}}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	t.Cleanup(cancel)
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, p := range env.Replicas {
				s.mu.Lock()
				down := p.Exited() && !s.killed[p]
				s.mu.Unlock()
				if down {
					t.Logf("supervisor: replica %s exited; restarting it", p.LogPath)
					_ = p.Start(ctx)
				}
			}
		}
	}()
	return s
}

func (s *supervisor) kill(p *framework.Process) {
	s.mu.Lock()
	s.killed[p] = true
	s.mu.Unlock()
	p.Kill()
}

func (s *supervisor) start(t *testing.T, p *framework.Process) {
	t.Helper()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	delete(s.killed, p)
	s.mu.Unlock()
}

// leader returns the replica holding the lease, waiting for one.
func leader(t *testing.T) *framework.Process {
	t.Helper()
	var out *framework.Process
	framework.Eventually(t, time.Minute, func() (bool, string) {
		for _, p := range env.Replicas {
			if p.Exited() {
				continue
			}
			if v, err := p.Metrics("leader_election_master_status"); err == nil && v == 1 {
				out = p
				return true, ""
			}
		}
		return false, "no replica leads"
	})
	return out
}
