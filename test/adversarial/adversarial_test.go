// Package adversarial tests the promise a platform team buys configstamp for,
// the halt, against what tenants and operators do every week, on the full
// local control plane. Every tenant action runs with a real ServiceAccount
// token bound to the namespace's `edit` ClusterRole, not as an admin; each
// test asserts what the other workloads see: a bad change stops at the first
// workload it breaks, and nothing a tenant writes by hand holds a slot.
package adversarial

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/hashkey"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

// hashKey is the suite's first HMAC key, so the stamp of the rollout meant to
// hang is known before kwok starts.
var hashKey = []byte("configstamp-adversarial-hmac-key!!")

const (
	haltNS = "adv-halt"
	// progressDeadline is the suite's --progress-deadline: the failing
	// workload's own progressDeadlineSeconds (600 s) never ends it first.
	progressDeadline = 20 * time.Second
	// quiet is how long a "nothing rolled" check watches: past every delay
	// configstamp adds to a halted workload (it asks again every 30 s; no
	// debounce in this suite).
	quiet = 35 * time.Second
)

// The wave of haltNS, in order: first (priority 10) fails on the bad value.
var wave = []string{"first", "second", "third"}

// The control plane is the suite's; each test runs a configstamp of its own
// (lane), so the tests run side by side.
func TestMain(m *testing.M) {
	os.Exit(framework.MainHolding(m, &env, framework.Config{Plane: framework.Kwok, NoConfigstamp: true},
		append([]string{waveHash("first", "bad")}, lateHeld()...), "no-such-node"))
}

// suiteFlags: a budget of 1, no debounce, a short progress deadline.
var suiteFlags = []string{"--max-concurrent-rollouts=1", "--debounce=0", "--progress-deadline=" + progressDeadline.String()}

// lane runs the test's own configstamp (framework.Lane) with the suite's key
// and flags.
func lane(t *testing.T) *framework.Lane {
	t.Helper()
	return env.LaneWith(t, framework.LaneOptions{HashKey: hashKey}, suiteFlags...)
}

// waveSpec reads key k of the shared ConfigMap through a keyRef (key
// precision: the shared ConfigMap's other keys are not referenced) and mounts
// its own ConfigMap, so each workload has a stamp of its own.
func waveSpec(name string) corev1.PodSpec {
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "own-"+name)
	spec.Containers[0].Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}, Key: "k"}}}}
	return spec
}

func shared(k, other string) *corev1.ConfigMap { return sharedIn(haltNS, k, other) }

func sharedIn(ns, k, other string) *corev1.ConfigMap {
	return framework.ConfigMap(ns, "shared", map[string]string{"k": k, "other": other}, nil)
}

// unschedulable makes a pod spec whose pods no node takes: a rollout of it
// never completes.
func unschedulable(spec corev1.PodSpec) corev1.PodSpec {
	spec.NodeSelector = map[string]string{"no-such-label": "anywhere"}
	return spec
}

// waveHash is the stamp of wave workload name when shared's k holds k.
func waveHash(name, k string) string { return waveHashIn(haltNS, name, k) }

// waveHashIn is waveHash in namespace ns.
func waveHashIn(ns, name, k string) string {
	return framework.StampOf(hashKey, ns, waveSpec(name), sharedIn(ns, k, "x"), framework.ConfigMap(ns, "own-"+name, map[string]string{"v": name}, nil))
}

// asTenant runs kubectl with the tenant's kubeconfig; a failure fails the test.
func asTenant(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	return framework.MustKubectlAs(t, kubeconfig, stdin, args...)
}

// stamps records every stamp each Deployment of a namespace carried, in
// order, from a watch started before the test acts: a stamp that came and
// went between two polls still shows.
type stamps struct {
	mu  sync.Mutex
	seq map[string][]string
}

func watchStamps(t *testing.T, ns string) *stamps {
	t.Helper()
	s := &stamps{seq: map[string][]string{}}
	env.WatchDeployments(t, ns, func(d *appsv1.Deployment) { s.add(d.Name, framework.TemplateHash(d)) })
	return s
}

func (s *stamps) add(name, h string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.seq[name]; h != "" && (len(q) == 0 || q[len(q)-1] != h) {
		s.seq[name] = append(q, h)
	}
}

func (s *stamps) of(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seq[name])
}

func deployment(t testing.TB, ns, name string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	d.Namespace, d.Name = ns, name
	env.Get(t, d)
	return d
}

func waitComplete(t *testing.T, ns string, names ...string) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		for _, n := range names {
			if !framework.RolledOut(deployment(t, ns, n)) {
				return false, n + " not rolled out"
			}
		}
		return true, ""
	})
}

// waitRestamped waits until each of names carries a second stamp (once the
// halt is lifted, its one rollout of the change starts).
func waitRestamped(t *testing.T, s *stamps, names ...string) {
	t.Helper()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		for _, n := range names {
			if q := s.of(n); len(q) < 2 {
				return false, n + " not stamped again since the halt was lifted"
			}
		}
		return true, ""
	})
}

// holdsStill watches for quiet and fails the test if a waiting workload's
// stamp changes (the watch would see it) or it gets a second ReplicaSet.
func holdsStill(t *testing.T, ns string, s *stamps, what string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(quiet)
	for time.Now().Before(deadline) {
		for _, n := range names {
			if q := s.of(n); len(q) != 1 {
				t.Fatalf("after %s, %s was stamped again: stamps %v (the halted change reached it)", what, n, q)
			}
		}
		<-time.After(500 * time.Millisecond)
	}
	for _, n := range names {
		if rs := len(env.ReplicaSets(t, ns, n)); rs != 1 {
			t.Fatalf("after %s, %s has %d ReplicaSets, want 1", what, n, rs)
		}
	}
	t.Logf("%s: %v kept their only stamp and ReplicaSet for %v", what, names, quiet)
}

// TestHaltHolds: budget 1, three Deployments on one shared ConfigMap, the
// first (priority 10) never ready with the bad value of key k. A tenant makes
// the change; then, in turn, edits a key nobody references, the operator
// rotates the hash key, configstamp restarts, and the tenant copies the
// failed workload's sealed halt onto another workload. Through all of it the
// two waiting workloads are never stamped with the bad change; once the
// tenant lifts the halt the documented way, each rolls exactly once.
func TestHaltHolds(t *testing.T) {
	t.Parallel()
	l := lane(t)
	l.NamespaceNamed(t, haltNS, nil)
	kc := env.Tenant(t, haltNS)
	s := watchStamps(t, haltNS)
	objs := []client.Object{shared("good", "x")}
	for i, n := range wave {
		objs = append(objs, framework.ConfigMap(haltNS, "own-"+n, map[string]string{"v": n}, nil))
		d := framework.Deployment(haltNS, n, framework.OptIn, waveSpec(n))
		d.Annotations = map[string]string{rollout.AnnotationPriority: fmt.Sprint(10 - 5*i)}
		objs = append(objs, d)
	}
	asTenant(t, kc, framework.Manifest(t, objs...), "apply", "-f", "-")
	waitComplete(t, haltNS, wave...)

	// 1. The slot passes only with the halt: when first fails at the deadline,
	// second must not be stamped in between.
	changed := time.Now()
	asTenant(t, kc, framework.Manifest(t, shared("bad", "x")), "apply", "-f", "-")
	first := deployment(t, haltNS, "first")
	framework.Eventually(t, progressDeadline+time.Minute, func() (bool, string) {
		r := rollout.Read(deployment(t, haltNS, "first").Annotations)
		return r.State == rollout.Failed, fmt.Sprintf("first: rollout-state %q", r.State)
	})
	env.WaitEvent(t, first, "RolloutFailed", "progress deadline of "+progressDeadline.String())
	failedAfter := time.Since(changed)
	if got := framework.TemplateHash(deployment(t, haltNS, "first")); got != waveHash("first", "bad") {
		t.Fatalf("first carries %s, want the precomputed bad stamp %s", got, waveHash("first", "bad"))
	}
	for _, n := range wave[1:] {
		if q := s.of(n); len(q) != 1 {
			t.Fatalf("%s was stamped with the failed change before the halt was written: stamps %v", n, q)
		}
		env.WaitEvent(t, deployment(t, haltNS, n), "RolloutHalted", "ConfigMap/shared")
	}
	t.Logf("first failed %v after the change; second and third report RolloutHalted", failedAfter.Round(time.Millisecond))
	holdsStill(t, haltNS, s, "the failure at the deadline", wave[1:]...)

	// 2. An edit of a key no workload references lifts nothing; nor does
	// `kubectl rollout undo` of the failed workload, which sets its annotations
	// to the earlier revision's (no rollout record) and cannot bring the old
	// configuration back (the ConfigMap holds the bad value): configstamp keeps
	// the stamp and the record, and says so.
	asTenant(t, kc, framework.Manifest(t, shared("bad", "y")), "apply", "-f", "-")
	undo := exec.Command("kubectl", "--kubeconfig", kc, "-n", haltNS, "rollout", "undo", "deployment/first")
	if out, err := undo.CombinedOutput(); err != nil || !strings.Contains(string(out), "revert the ConfigMap") {
		t.Fatalf("kubectl rollout undo of the failed workload: %v\n%s", err, out)
	}
	if r := rollout.Read(deployment(t, haltNS, "first").Annotations); r.State != rollout.Failed || r.Halted == "" {
		t.Fatalf("after kubectl rollout undo, first's record is %+v; want it failed and halting", r)
	}
	holdsStill(t, haltNS, s, "an edit of the unreferenced key and an undo of the failed workload", wave[1:]...)

	// 3. A rotation of the hash key, as the README documents it, lifts nothing.
	oldID := deployment(t, haltNS, "first").Annotations[stamp.AnnotationKeyID]
	newKey := framework.Secret(l.Own, "configstamp-hash-key", map[string]string{"key": "a-rotated-adversarial-hmac-key!!!!"})
	env.Apply(t, newKey)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		id := deployment(t, haltNS, "first").Annotations[stamp.AnnotationKeyID]
		return id != oldID, "first not re-baselined under the new key yet (key-id " + id + ")"
	})
	holdsStill(t, haltNS, s, "the key rotation", wave[1:]...)

	// 4. A restart in the middle of the rotation still knows the previous key.
	if err := l.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	holdsStill(t, haltNS, s, "a restart after the rotation", wave[1:]...)

	// 5. A copied halt counts for nothing: the tenant copies first's sealed
	// record onto second, then lifts first's halt the documented way.
	rec := deployment(t, haltNS, "first").Annotations
	var copied []string
	for _, k := range []string{rollout.AnnotationState, rollout.AnnotationStarted, rollout.AnnotationCause, rollout.AnnotationHalted, rollout.AnnotationSeal} {
		copied = append(copied, k+"="+rec[k])
	}
	asTenant(t, kc, "", append([]string{"-n", haltNS, "annotate", "--overwrite", "deployment", "second"}, copied...)...)
	lifted := time.Now()
	asTenant(t, kc, "", "-n", haltNS, "annotate", "deployment", "first", rollout.AnnotationHalted+"-")
	waitRestamped(t, s, wave[1:]...)
	resumed := time.Since(lifted)
	waitComplete(t, haltNS, wave[1:]...)
	for _, n := range wave[1:] {
		if q := s.of(n); len(q) != 2 || q[1] != framework.TemplateHash(deployment(t, haltNS, n)) {
			t.Errorf("%s: stamps %v, want exactly one new stamp after the halt was lifted", n, q)
		}
		if rs := len(env.ReplicaSets(t, haltNS, n)); rs != 2 {
			t.Errorf("%s has %d ReplicaSets after the halt was lifted, want 2 (rolled once)", n, rs)
		}
	}
	t.Logf("the copied halt held nothing: both waiting workloads were stamped %v after the tenant lifted first's halt, and rolled once",
		resumed.Round(time.Millisecond))
}

// TestForgedRecordsHoldNoSlot: a tenant writes a `rolling` record started in
// 2099 (with a made-up seal) on its own opted-in Deployment, and a `rolling`
// record started now, with the seal copied from another of its workloads, on
// a Deployment whose pods are never scheduled (so it would never complete
// before --progress-deadline). With a budget of 1, a change in another
// namespace still rolls at once, and no slot is in use.
func TestForgedRecordsHoldNoSlot(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.Namespace(t, "adv-forge", nil)
	kc := env.Tenant(t, ns)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	asTenant(t, kc, framework.Manifest(t, framework.ConfigMap(ns, "cfg", map[string]string{"v": "1"}, nil),
		framework.Deployment(ns, "forger", framework.OptIn, spec), framework.Deployment(ns, "donor", framework.OptIn, spec),
		framework.Deployment(ns, "copy", framework.OptIn, unschedulable(framework.PodSpec()))), "apply", "-f", "-")
	waitComplete(t, ns, "forger", "donor")
	// donor gets a genuine sealed record: one rollout, completed. forger's
	// rollout of the same change must be over too (the budget of 1 runs them
	// one after the other): a record forged over a rollout still under way
	// leaves configstamp's own stamp holding the slot (at most 30 s).
	asTenant(t, kc, framework.Manifest(t, framework.ConfigMap(ns, "cfg", map[string]string{"v": "2"}, nil)), "apply", "-f", "-")
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		for _, n := range []string{"donor", "forger"} {
			if r := rollout.Read(deployment(t, ns, n).Annotations); r.State != rollout.Completed {
				return false, n + " has not completed its rollout yet"
			}
		}
		return true, ""
	})
	waitComplete(t, ns, "forger", "donor")
	donor := deployment(t, ns, "donor").Annotations
	asTenant(t, kc, "", "-n", ns, "annotate", "--overwrite", "deployment", "forger",
		rollout.AnnotationState+"=rolling", rollout.AnnotationStarted+"=2099-01-01T00:00:00Z",
		rollout.AnnotationSeal+"="+strings.SplitN(donor[rollout.AnnotationSeal], ".", 2)[0]+".00112233445566778899aabbccddeeff")
	asTenant(t, kc, "", "-n", ns, "annotate", "--overwrite", "deployment", "copy",
		rollout.AnnotationState+"=rolling", rollout.AnnotationStarted+"="+time.Now().UTC().Format(time.RFC3339),
		rollout.AnnotationCause+"="+donor[rollout.AnnotationCause], rollout.AnnotationSeal+"="+donor[rollout.AnnotationSeal])

	other := l.Namespace(t, "adv-other", nil)
	app := env.App(t, other)
	waitComplete(t, other, app.Name)
	before := framework.TemplateHash(deployment(t, other, app.Name))
	// From when the change is stored: kubectl's own time on a loaded
	// machine is not a slot held (a forged record would hold it for the
	// whole --progress-deadline).
	env.Apply(t, framework.ConfigMap(other, "app-config", map[string]string{"a": "2"}, nil))
	changed := time.Now()
	framework.Eventually(t, progressDeadline+30*time.Second, func() (bool, string) {
		return framework.TemplateHash(deployment(t, other, app.Name)) != before, "the other namespace's Deployment is not stamped"
	})
	waited := time.Since(changed)
	t.Logf("with a forged and a copied rolling record in %s, the other namespace's change was stamped in %v (budget 1)", ns, waited.Round(time.Millisecond))
	if waited > 10*time.Second {
		t.Errorf("the other namespace waited %v for its only slot (--progress-deadline %v): a forged record held it", waited, progressDeadline)
	}
	waitComplete(t, other, app.Name)
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		v, err := l.Metrics("configstamp_rollout_slots_in_use")
		return err == nil && v == 0, fmt.Sprintf("%v slots in use (%v) with only forged records open", v, err)
	})
}

// legacyID is a change id as the previous release could write it (an unkeyed
// digest, say): after the takeover it must be nowhere.
const legacyID = "0123456789abcdef"

// TestUpgradeTakesOverRecords: records the previous release wrote carry no
// seal. A halt it wrote (first failed; second and third wait) and an in-flight
// rollout (busy, in another namespace) are made real, then turned into the
// previous release's form (seal removed, change ids replaced by a legacy
// id, the key Secret without the records-sealed mark) while configstamp is
// stopped. After the upgrade the halt still holds, the in-flight rollout holds
// its slot until it fails at its deadline, and no legacy id is left.
func TestUpgradeTakesOverRecords(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.Namespace(t, "adv-upgrade", nil)
	s := watchStamps(t, ns)
	objs := []client.Object{sharedIn(ns, "good", "x")}
	for i, n := range wave {
		objs = append(objs, framework.ConfigMap(ns, "own-"+n, map[string]string{"v": n}, nil))
		spec := waveSpec(n)
		if n == "first" {
			spec = unschedulable(spec)
		}
		d := framework.Deployment(ns, n, framework.OptIn, spec)
		d.Annotations = map[string]string{rollout.AnnotationPriority: fmt.Sprint(10 - 5*i)}
		objs = append(objs, d)
	}
	env.Apply(t, objs...)
	waitComplete(t, ns, wave[1:]...)
	busyNS := l.Namespace(t, "adv-upgrade-busy", nil)
	busySpec := framework.PodSpec()
	framework.MountConfigMap(&busySpec, "cfg")
	env.Apply(t, framework.ConfigMap(busyNS, "cfg", map[string]string{"v": "1"}, nil),
		framework.Deployment(busyNS, "busy", framework.OptIn, unschedulable(busySpec)))

	env.Apply(t, sharedIn(ns, "bad", "x"))
	framework.Eventually(t, progressDeadline+time.Minute, func() (bool, string) {
		r := rollout.Read(deployment(t, ns, "first").Annotations)
		return r.State == rollout.Failed && r.Halted != "", fmt.Sprintf("first: rollout-state %q", r.State)
	})
	for _, n := range wave[1:] {
		env.WaitEvent(t, deployment(t, ns, n), "RolloutHalted", "ConfigMap/shared")
	}

	// What the previous release left: no seals, its own ids, no mark.
	l.Stop()
	legacy := "ConfigMap/shared@" + legacyID
	env.Kubectl(t, "", "-n", ns, "annotate", "--overwrite", "deployment", "first", rollout.AnnotationSeal+"-",
		rollout.AnnotationCause+"="+legacy, rollout.AnnotationHalted+"="+legacy)
	env.Kubectl(t, "", "-n", busyNS, "annotate", "--overwrite", "deployment", "busy",
		rollout.AnnotationState+"=rolling", rollout.AnnotationStarted+"="+time.Now().UTC().Format(time.RFC3339),
		rollout.AnnotationCause+"=ConfigMap/cfg@"+legacyID)
	env.Kubectl(t, "", "-n", l.Own, "annotate", "secret", "configstamp-hash-key", hashkey.AnnotationRecordsSealed+"-")

	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		v, err := l.Metrics("configstamp_rollout_slots_in_use")
		return err == nil && v == 1, fmt.Sprintf("%v slots in use (%v): the in-flight rollout of the previous release must hold one", v, err)
	})
	// The mark follows the seals by one write: poll for it.
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		key := &corev1.Secret{}
		key.Namespace, key.Name = l.Own, "configstamp-hash-key"
		env.Get(t, key)
		return key.Annotations[hashkey.AnnotationRecordsSealed] != "",
			fmt.Sprintf("the key Secret is not marked %s after the takeover", hashkey.AnnotationRecordsSealed)
	})
	for _, d := range []*appsv1.Deployment{deployment(t, ns, "first"), deployment(t, busyNS, "busy")} {
		a := d.Annotations
		if a[rollout.AnnotationSeal] == "" || strings.Contains(a[rollout.AnnotationCause]+a[rollout.AnnotationHalted], legacyID) {
			t.Errorf("%s not taken over: seal %q, cause %q, halted %q", d.Name, a[rollout.AnnotationSeal], a[rollout.AnnotationCause], a[rollout.AnnotationHalted])
		}
	}
	if h := deployment(t, ns, "first").Annotations[rollout.AnnotationHalted]; !strings.HasPrefix(h, "ConfigMap/shared@") {
		t.Errorf("first's halt was dropped in the takeover: halted %q", h)
	}
	holdsStill(t, ns, s, "the upgrade", wave[1:]...)
	env.WaitEvent(t, deployment(t, busyNS, "busy"), "RolloutFailed", "progress deadline of "+progressDeadline.String())

	env.Kubectl(t, "", "-n", ns, "annotate", "deployment", "first", rollout.AnnotationHalted+"-")
	waitRestamped(t, s, wave[1:]...)
	waitComplete(t, ns, wave[1:]...)
	for _, n := range wave[1:] {
		if rs := len(env.ReplicaSets(t, ns, n)); rs != 2 {
			t.Errorf("%s has %d ReplicaSets after the halt was lifted, want 2 (rolled once)", n, rs)
		}
	}
}

// TestNewChangeSupersedesTheRollout: a Deployment whose rollout never ends
// (its pods are never scheduled) is rolling a change when a newer one comes.
// The newer change is stamped at once, well before the deadline of the
// rollout under way, which keeps its slot (budget 1) and its record now names
// the newer change; the superseded rollout neither fails nor halts: the one
// RolloutFailed, at the newer rollout's own deadline, names the newer change.
//
// Not parallel: "at once" is 5 s, measured on a control plane that no other
// test loads (side by side, the stamp came after 7 s): it runs first, alone.
func TestNewChangeSupersedesTheRollout(t *testing.T) {
	l := lane(t)
	ns := l.Namespace(t, "adv-supersede", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"v": "1"}, nil),
		framework.Deployment(ns, "slow", framework.OptIn, unschedulable(spec)))
	s := watchStamps(t, ns)
	framework.Eventually(t, 30*time.Second, func() (bool, string) { return len(s.of("slow")) == 1, "slow not stamped at CREATE" })

	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"v": "2"}, nil))
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		r := rollout.Read(deployment(t, ns, "slow").Annotations)
		return r.State == rollout.Rolling && len(s.of("slow")) == 2, fmt.Sprintf("slow: %q, stamps %v", r.State, s.of("slow"))
	})
	first := rollout.Read(deployment(t, ns, "slow").Annotations)

	changed := time.Now()
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"v": "3"}, nil))
	framework.Eventually(t, progressDeadline+30*time.Second, func() (bool, string) {
		return len(s.of("slow")) == 3, fmt.Sprintf("slow: stamps %v", s.of("slow"))
	})
	superseded := time.Since(changed)
	into := time.Since(first.Started)
	second := rollout.Read(deployment(t, ns, "slow").Annotations)
	t.Logf("the newer change was stamped %v after it was applied, %v into the rollout it superseded (deadline %v)",
		superseded.Round(time.Millisecond), into.Round(time.Second), progressDeadline)
	// Stamped before the rollout under way could have ended at its deadline:
	// the newer change did not wait for it. (Not a bound in seconds after the
	// change: on a loaded machine the stamp took 8 s with no wait at all.)
	if into >= progressDeadline {
		t.Fatalf("the newer change waited %v, until %v into the rollout under way (its deadline %v)", superseded, into, progressDeadline)
	}
	if second.State != rollout.Rolling || second.Cause == first.Cause || second.Halted != "" {
		t.Fatalf("record after the newer change %+v, was %+v: want rolling for the newer change", second, first)
	}
	if v, err := l.Metrics("configstamp_rollout_slots_in_use"); err != nil || v != 1 {
		t.Errorf("%v slots in use (%v), want the one slow keeps", v, err)
	}
	slow := deployment(t, ns, "slow")
	env.WaitEvent(t, slow, "ConfigChanged", "supersedes the one under way")
	framework.Eventually(t, progressDeadline+30*time.Second, func() (bool, string) {
		return rollout.Read(deployment(t, ns, "slow").Annotations).State == rollout.Failed, "the newer rollout has not failed at its deadline yet"
	})
	env.WaitEvent(t, slow, "RolloutFailed", second.Cause)
	if n := env.CountEvents(t, slow, "RolloutFailed"); n != 1 {
		t.Errorf("%d RolloutFailed events, want 1 (the superseded rollout must not fail on its own)", n)
	}
}
