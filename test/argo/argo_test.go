// Package argo runs configstamp's Argo Rollouts support against Argo's real
// controller: the rollouts-controller of the argo-rollouts Go module, built
// from the module proxy as the control plane is, on the full local control
// plane (kube-controller-manager, scheduler, kwok). configstamp runs with the
// kinds file users apply, config/kinds/argo-rollouts/kinds.yaml. Where
// test/kinds writes a Rollout's status by hand, here Argo writes it: the
// canary steps, the pause, the abort. It runs in `make test-argo` (and CI),
// not in `make test`: building Argo's controller is minutes of CPU.
package argo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	kinds, err := framework.ArgoKindsFile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "argo:", err)
		os.Exit(1)
	}
	os.Exit(framework.Main(m, &env, framework.Config{
		Plane: framework.Kwok,
		// One slot, no debounce; configstamp's own deadline longer than
		// Argo's progressDeadlineSeconds, so that Argo's abort is what fails
		// a rollout here.
		Args: []string{"--kinds-config=" + kinds, "--max-concurrent-rollouts=1", "--debounce=0", "--progress-deadline=3m", "--pin"},
		// configstamp reads the kinds whose CRD is installed when it starts.
		Prepare: func(ctx context.Context, e *framework.Env) (string, error) {
			return "", startArgo(ctx, e) // configstamp runs as admin here
		},
		ExtraKinds: []string{"Rollout"},
	}))
}

// startArgo installs Argo Rollouts' CRDs from framework.ArgoModule and runs its
// controller as a process of this suite (it dies with it) with the admin
// kubeconfig. The controller is bin/'s, built by `make argo-rollouts`
// (hack/argo-rollouts.sh, which this runs when it is missing).
func startArgo(ctx context.Context, e *framework.Env) error {
	began := time.Now()
	dir, err := framework.ArgoSource(ctx)
	if err != nil {
		return err
	}
	if err := e.ApplyCRDs(ctx, "rollouts.argoproj.io", "-k", filepath.Join(dir, "manifests", "crds")); err != nil {
		return err
	}
	bin, err := e.ControllerBinary(ctx, "argo-rollouts.sh", "argo-rollouts-controller", strings.Split(framework.ArgoModule, "@")[1])
	if err != nil {
		return err
	}
	log, err := e.StartController("argo-rollouts", bin, 2, func(ports []string) []string {
		return []string{"--kubeconfig=" + e.Kubeconfig, "--leader-elect=false", "--metricsport=" + ports[0], "--healthzPort=" + ports[1]}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "argo: CRDs and controller of %s up in %v (log %s)\n", framework.ArgoModule, time.Since(began).Round(time.Millisecond), log)
	return nil
}

// canary is a Rollout as a user writes it: replicas 2, canary steps (50%,
// a pause of 2 s, 100%), a pod template that mounts the ConfigMap cm, opted
// in, with a rollout priority and Argo's progress deadline.
func canary(ns, name, cm string, priority, deadline int) string {
	return fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: %[2]s
  namespace: %[1]s
  labels: {configstamp.io/enabled: "true"}
  annotations: {configstamp.io/rollout-priority: "%[4]d"}
spec:
  replicas: 2
  progressDeadlineSeconds: %[5]d
  progressDeadlineAbort: true
  selector:
    matchLabels: {app: %[2]s}
  strategy:
    canary:
      steps:
      - setWeight: 50
      - pause: {duration: 2s}
  template:
    metadata:
      labels: {app: %[2]s}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: app
        image: registry.example/app:1
        volumeMounts:
        - {name: config, mountPath: /config}
      volumes:
      - name: config
        configMap: {name: %[3]s}
`, ns, name, cm, priority, deadline)
}

func rolloutObj(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("argoproj.io/v1alpha1")
	u.SetKind("Rollout")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// status is what Argo reports of a Rollout, and its template's stamp.
type status struct {
	phase, message, stamp string
	step, steps           int64
	// current: Argo's status is about the Rollout's current generation.
	current bool
}

func read(t *testing.T, ns, name string) (*unstructured.Unstructured, status) {
	t.Helper()
	u := rolloutObj(ns, name)
	env.Get(t, u)
	var s status
	s.phase, _, _ = unstructured.NestedString(u.Object, "status", "phase")
	s.message, _, _ = unstructured.NestedString(u.Object, "status", "message")
	s.stamp, _, _ = unstructured.NestedString(u.Object, "spec", "template", "metadata", "annotations", stamp.AnnotationHash)
	s.step, _, _ = unstructured.NestedInt64(u.Object, "status", "currentStepIndex")
	steps, _, _ := unstructured.NestedSlice(u.Object, "spec", "strategy", "canary", "steps")
	s.steps = int64(len(steps))
	observed, _, _ := unstructured.NestedString(u.Object, "status", "observedGeneration")
	s.current = observed == strconv.FormatInt(u.GetGeneration(), 10)
	return u, s
}

// waitHealthy waits until Argo reports the Rollout's current generation
// Healthy with its canary through every step, carrying stamp (any stamp when "").
func waitHealthy(t *testing.T, ns, name, stamp string) status {
	t.Helper()
	var s status
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, s = read(t, ns, name)
		return s.current && s.phase == "Healthy" && s.step == s.steps && s.stamp != "" && (stamp == "" || s.stamp == stamp),
			fmt.Sprintf("%s: phase %q (%s), step %d of %d, stamp %q, status of the current generation %v", name, s.phase, s.message, s.step, s.steps, s.stamp, s.current)
	})
	return s
}

// TestCanaryRollsOncePerChange: a Rollout with canary steps that mounts a
// ConfigMap is stamped at CREATE; each change of the ConfigMap restamps it
// once, Argo walks the canary (50%, pause, 100%) to Healthy, and exactly one
// new ReplicaSet appears per change; configstamp follows the rollout to
// completed.
func TestCanaryRollsOncePerChange(t *testing.T) {
	ns := env.Namespace(t, "argo-canary", nil)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"k": "v0"}, nil))
	env.Kubectl(t, canary(ns, "web", "cfg", 0, 60), "apply", "-f", "-")
	s := waitHealthy(t, ns, "web", "")
	if n := len(env.ReplicaSets(t, ns, "web")); n != 1 {
		t.Fatalf("%d ReplicaSets after the create, want 1 (stamped at CREATE, no second rollout)", n)
	}
	web := rolloutObj(ns, "web")
	for i := 1; i <= 3; i++ {
		changed := time.Now()
		env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"k": "v" + strconv.Itoa(i)}, nil))
		var stamped time.Duration
		var now status
		framework.Eventually(t, time.Minute, func() (bool, string) {
			_, now = read(t, ns, "web")
			stamped = time.Since(changed)
			return now.stamp != s.stamp, "not restamped"
		})
		// Through its steps: Argo pauses the new stamp's canary at step 1
		// (50%), then goes on to Healthy.
		paused := false
		framework.Eventually(t, 2*time.Minute, func() (bool, string) {
			_, s = read(t, ns, "web")
			if s.current && s.stamp == now.stamp && s.phase == "Paused" && s.step == 1 {
				paused = true
			}
			return paused && s.current && s.phase == "Healthy" && s.step == s.steps && s.stamp == now.stamp,
				fmt.Sprintf("phase %q (%s), step %d of %d, paused at step 1 seen %v", s.phase, s.message, s.step, s.steps, paused)
		})
		framework.Eventually(t, time.Minute, func() (bool, string) {
			env.Get(t, web)
			r := rollout.Read(web.GetAnnotations())
			return r.State == rollout.Completed, fmt.Sprintf("configstamp's record %q, want completed", r.State)
		})
		rs := env.ReplicaSets(t, ns, "web")
		t.Logf("change %d: stamped %v after it, Healthy through %d canary steps %v after it; %d ReplicaSets",
			i, stamped.Round(time.Millisecond), s.steps, time.Since(changed).Round(time.Millisecond), len(rs))
		if len(rs) != i+1 {
			t.Errorf("change %d: %d ReplicaSets, want %d (one rollout per change)", i, len(rs), i+1)
		}
	}
}

// TestAbortedCanaryHaltsTheChange: budget 1; two canary Rollouts, "first"
// (priority 10, Argo's progressDeadlineSeconds 10 with abort) and "second"
// (priority 0), mount one ConfigMap. With the node cordoned, the change's
// canary pods never schedule: Argo aborts "first" at its progress deadline
// (Degraded), configstamp records the failure and halts the change, and
// "second" is never stamped with it. Uncordoned, and resumed as documented
// (the halted annotation removed), "second" rolls once through its canary.
func TestAbortedCanaryHaltsTheChange(t *testing.T) {
	ns := env.Namespace(t, "argo-abort", nil)
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"k": "good"}, nil))
	env.Kubectl(t, canary(ns, "first", "shared", 10, 10)+"---\n"+canary(ns, "second", "shared", 0, 600), "apply", "-f", "-")
	waitHealthy(t, ns, "first", "")
	before := waitHealthy(t, ns, "second", "").stamp

	nodes, _ := env.Kubectl(t, "", "get", "nodes", "-o", "name")
	for _, n := range strings.Fields(nodes) {
		env.Kubectl(t, "", "cordon", n)
	}
	t.Cleanup(func() {
		for _, n := range strings.Fields(nodes) {
			_, _, _ = env.KubectlErr("", "uncordon", n)
		}
	})
	changed := time.Now()
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"k": "bad"}, nil))
	first := rolloutObj(ns, "first")
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, s := read(t, ns, "first")
		env.Get(t, first)
		r := rollout.Read(first.GetAnnotations())
		return s.phase == "Degraded" && r.State == rollout.Failed && r.Halted != "",
			fmt.Sprintf("first: phase %q (%s), configstamp's record %q halted %q", s.phase, s.message, r.State, r.Halted)
	})
	failed := time.Since(changed)
	env.WaitEvent(t, first, controllers.ReasonRolloutFailed, "failed")
	// Nothing configstamp adds delays "second" (no debounce): 20 s past the
	// failure, it still carries its old stamp.
	hold := time.Now()
	for time.Since(hold) < 20*time.Second {
		if _, s := read(t, ns, "second"); s.stamp != before {
			t.Fatalf("second was stamped with the aborted change %v after the failure: %q", time.Since(hold).Round(time.Millisecond), s.stamp)
		}
		<-time.After(500 * time.Millisecond)
	}
	t.Logf("first aborted by Argo (Degraded) and halted by configstamp %v after the change; second held for 20 s", failed.Round(time.Millisecond))

	for _, n := range strings.Fields(nodes) {
		env.Kubectl(t, "", "uncordon", n)
	}
	env.Kubectl(t, "", "-n", ns, "annotate", "rollout", "first", rollout.AnnotationHalted+"-")
	resumed := time.Now()
	var now status
	framework.Eventually(t, time.Minute, func() (bool, string) {
		_, now = read(t, ns, "second")
		return now.stamp != before, "second not stamped after the resume"
	})
	t.Logf("after the resume, second stamped in %v", time.Since(resumed).Round(time.Millisecond))
	waitHealthy(t, ns, "second", now.stamp)
	if n := len(env.ReplicaSets(t, ns, "second")); n != 2 {
		t.Errorf("second has %d ReplicaSets, want 2 (one rollout of the change)", n)
	}
}

// TestPinnedCanary: a pinned canary Rollout mounts a snapshot of its
// ConfigMap from its creation; each change moves it to a new snapshot with
// one new ReplicaSet, Argo walks the canary to Healthy on it, the previous
// snapshot keeps the previous data, and the ReplicaSets, not the Rollout, own
// the snapshots.
func TestPinnedCanary(t *testing.T) {
	ns := env.Namespace(t, "argo-pin", nil)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"k": "v0"}, nil))
	manifest := strings.Replace(canary(ns, "web", "cfg", 0, 60), "annotations: {", "annotations: {configstamp.io/pin: \"true\", ", 1)
	env.Kubectl(t, manifest, "apply", "-f", "-")
	s := waitHealthy(t, ns, "web", "")
	mounted := func() string {
		u, _ := read(t, ns, "web")
		vols, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "volumes")
		name, _, _ := unstructured.NestedString(vols[0].(map[string]any), "configMap", "name")
		return name
	}
	first := mounted()
	if !strings.HasPrefix(first, "cfg-") || len(first) != len("cfg-")+10 {
		t.Fatalf("the pinned Rollout mounts %q, want a snapshot of cfg", first)
	}
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"k": "v1"}, nil))
	framework.Eventually(t, time.Minute, func() (bool, string) {
		_, now := read(t, ns, "web")
		return now.stamp != s.stamp, "not restamped"
	})
	waitHealthy(t, ns, "web", "")
	second := mounted()
	data := func(name string) string {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data["k"]
	}
	if second == first || data(second) != "v1" || data(first) != "v0" {
		t.Fatalf("after the change the Rollout mounts %s (k=%s), before %s (k=%s); want a new snapshot with v1, the old one with v0", second, data(second), first, data(first))
	}
	if n := len(env.ReplicaSets(t, ns, "web")); n != 2 {
		t.Fatalf("%d ReplicaSets after one change, want 2", n)
	}
	for _, name := range []string{first, second} {
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
				return false, err.Error()
			}
			return len(cm.OwnerReferences) == 1 && cm.OwnerReferences[0].Kind == "ReplicaSet", fmt.Sprintf("snapshot %s owners %v, want one ReplicaSet", name, cm.OwnerReferences)
		})
	}
}
