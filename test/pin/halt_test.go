package pin

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

const (
	// progressDeadline is the suite's --progress-deadline.
	progressDeadline = 20 * time.Second
	// quiet is how long a "nothing rolled" check watches: past every delay
	// configstamp adds to a halted workload (it asks again every 30 s; no
	// debounce in this suite).
	quiet = 35 * time.Second
)

// pinnedWave is a pinned Deployment mounting cfg, with a rollout priority;
// broken ones are never scheduled, so a rollout of them never completes.
func pinnedWave(ns, name string, priority int, broken bool) *appsv1.Deployment {
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	if broken {
		spec.NodeSelector = map[string]string{"no-such-label": "anywhere"}
	}
	d := framework.Deployment(ns, name, framework.OptIn, spec)
	d.Annotations = map[string]string{pin.AnnotationPin: "true", rollout.AnnotationPriority: fmt.Sprint(priority)}
	return d
}

// TestHaltHoldsForPinnedFiles: budget 1, three pinned Deployments mounting
// one ConfigMap as files, the first (priority 10) never ready. A change fails
// on the first; the two others keep mounting the old snapshot, whose data is
// the old data (so the kubelet has nothing new to write into their pods),
// for 35 s, and through a tenant's own image bump of one of them, which rolls
// the image on the old snapshot. Once the tenant lifts the halt, both roll
// onto the new snapshot, once.
func TestHaltHoldsForPinnedFiles(t *testing.T) {
	ns := env.Namespace(t, "pinhalt", nil)
	kc := env.Tenant(t, ns)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"k": "good"}, nil),
		pinnedWave(ns, "first", 10, true), pinnedWave(ns, "second", 5, false), pinnedWave(ns, "third", 0, false))
	second, third := pinnedWave(ns, "second", 5, false), pinnedWave(ns, "third", 0, false)
	waitRolledOut(t, second)
	waitRolledOut(t, third)
	good := mountedSnapshot(second)

	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"k": "bad"}, nil))
	first := pinnedWave(ns, "first", 10, true)
	framework.Eventually(t, progressDeadline+time.Minute, func() (bool, string) {
		env.Get(t, first)
		r := rollout.Read(first.Annotations)
		return r.State == rollout.Failed && r.Halted != "", fmt.Sprintf("first: rollout-state %q", r.State)
	})
	if got := configMapData(t, ns, mountedSnapshot(first), "cfg"); got["k"] != "bad" {
		t.Fatalf("first mounts %v, want the bad change it failed with", got)
	}

	// A tenant bumps second's image: it rolls, on the old snapshot.
	env.Get(t, second)
	stamp2 := framework.TemplateHash(second)
	out, err := exec.Command("kubectl", "--kubeconfig", kc, "-n", ns, "set", "image", "deployment/second", "app=registry.example/app:2").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "halted") {
		t.Fatalf("the tenant's image bump: %v\n%s", err, out)
	}
	env.WaitEvent(t, second, webhook.ReasonHeldByHalt, "keeps the current snapshots")
	env.Get(t, second)
	if second.Spec.Template.Spec.Containers[0].Image != "registry.example/app:2" || mountedSnapshot(second) != good || framework.TemplateHash(second) != stamp2 {
		t.Fatalf("after the image bump second runs %s on %s (stamp %s); want the new image on the old snapshot %s (stamp %s)",
			second.Spec.Template.Spec.Containers[0].Image, mountedSnapshot(second), framework.TemplateHash(second), good, stamp2)
	}
	waitRolledOut(t, second)

	keeps(t, quiet, func() string {
		for _, d := range []*appsv1.Deployment{second, third} {
			env.Get(t, d)
			if mountedSnapshot(d) != good {
				return fmt.Sprintf("%s mounts %s while the change is halted, want the old snapshot %s", d.Name, mountedSnapshot(d), good)
			}
		}
		return ""
	})
	if got := configMapData(t, ns, good, "cfg"); got["k"] != "good" {
		t.Fatalf("the old snapshot %s holds %v, want k=good", good, got)
	}
	t.Logf("second and third kept the old snapshot %s (k=good) for %v and through the tenant's image bump", good, quiet)

	// The tenant deletes the old snapshot while the halt holds: cfg no longer
	// holds its content, so configstamp cannot make it again. It says so on
	// both workloads (counted), and moves neither: that stays the wave's.
	lostBefore, _ := env.Configstamp.Metrics("configstamp_warnings_total", `reason="SnapshotLost"`)
	if out, err := exec.Command("kubectl", "--kubeconfig", kc, "-n", ns, "delete", "configmap", good).CombinedOutput(); err != nil {
		t.Fatalf("the tenant's delete of the snapshot: %v\n%s", err, out)
	}
	for _, d := range []*appsv1.Deployment{second, third} {
		env.WaitEvent(t, d, controllers.ReasonSnapshotLost, good, "cannot be made again", "kubectl rollout restart")
		env.Get(t, d)
		if mountedSnapshot(d) != good {
			t.Fatalf("%s mounts %s after its snapshot was deleted, want it kept on %s until the halt lifts", d.Name, mountedSnapshot(d), good)
		}
	}
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		lost, err := env.Configstamp.Metrics("configstamp_warnings_total", `reason="SnapshotLost"`)
		return err == nil && lost >= lostBefore+2, fmt.Sprintf("configstamp_warnings_total{reason=SnapshotLost} %v (was %v), %v", lost, lostBefore, err)
	})

	// The documented resume: both roll onto the new snapshot, once.
	if out, err := exec.Command("kubectl", "--kubeconfig", kc, "-n", ns, "annotate", "deployment", "first", rollout.AnnotationHalted+"-").CombinedOutput(); err != nil {
		t.Fatalf("lifting the halt: %v\n%s", err, out)
	}
	for _, d := range []*appsv1.Deployment{second, third} {
		framework.Eventually(t, time.Minute, func() (bool, string) {
			env.Get(t, d)
			return mountedSnapshot(d) == mountedSnapshot(first), fmt.Sprintf("%s mounts %s, want %s", d.Name, mountedSnapshot(d), mountedSnapshot(first))
		})
		waitRolledOut(t, d)
	}
	if n := len(env.ReplicaSets(t, ns, "second")); n != 3 { // created, image bump, the change
		t.Errorf("second has %d ReplicaSets, want 3", n)
	}
	if n := len(env.ReplicaSets(t, ns, "third")); n != 2 {
		t.Errorf("third has %d ReplicaSets, want 2", n)
	}
}
