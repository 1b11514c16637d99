package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/workload"
)

func deployment(gen int64, replicas int32, st appsv1.DeploymentStatus, mutate ...func(*appsv1.Deployment)) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)}, Status: st}
	for _, m := range mutate {
		m(d)
	}
	return d
}

func statefulSet(gen int64, replicas int32, strategy appsv1.StatefulSetUpdateStrategy, st appsv1.StatefulSetStatus) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: gen},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas), UpdateStrategy: strategy}, Status: st}
}

func daemonSet(gen int64, strategy appsv1.DaemonSetUpdateStrategyType, st appsv1.DaemonSetStatus) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: gen},
		Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: strategy}}, Status: st}
}

var (
	rollingSTS  = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
	onDeleteSTS = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
)

func partitioned(p int32) appsv1.StatefulSetUpdateStrategy {
	return appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(p)}}
}

func exceeded(d *appsv1.Deployment) {
	d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
}

func TestComplete(t *testing.T) {
	tests := map[string]struct {
		obj                    client.Object
		complete, exceededWant bool
	}{
		// Deployment (RollingUpdate and Recreate are judged alike, by replicas).
		"deployment: not yet observed":            {deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3}), false, false},
		"deployment: updating":                    {deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 1, AvailableReplicas: 3}), false, false},
		"deployment: old pods left":               {deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 3, AvailableReplicas: 3}), false, false},
		"deployment: updated, not all available":  {deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 2}), false, false},
		"deployment: complete":                    {deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3}), true, false},
		"deployment: recreate, all down":          {deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2}, func(d *appsv1.Deployment) { d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType }), false, false},
		"deployment: HPA scaled up mid-rollout":   {deployment(3, 5, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 5, UpdatedReplicas: 3, AvailableReplicas: 3}), false, false},
		"deployment: HPA scaled up, all updated":  {deployment(3, 5, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 5, UpdatedReplicas: 5, AvailableReplicas: 5}), true, false},
		"deployment: HPA scaled down mid-rollout": {deployment(3, 2, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}), true, false},
		"deployment: paused":                      {deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 1}, func(d *appsv1.Deployment) { d.Spec.Paused = true }), true, false},
		"deployment: progress deadline exceeded":  {deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 1}, exceeded), false, true},
		// StatefulSet.
		"statefulset: rolling, not observed":             {statefulSet(2, 3, rollingSTS, appsv1.StatefulSetStatus{ObservedGeneration: 1, ReadyReplicas: 3, UpdateRevision: "b", CurrentRevision: "b"}), false, false},
		"statefulset: rolling, updating":                 {statefulSet(2, 3, rollingSTS, appsv1.StatefulSetStatus{ObservedGeneration: 2, ReadyReplicas: 3, UpdatedReplicas: 1, UpdateRevision: "b", CurrentRevision: "a"}), false, false},
		"statefulset: rolling, not ready":                {statefulSet(2, 3, rollingSTS, appsv1.StatefulSetStatus{ObservedGeneration: 2, ReadyReplicas: 2, UpdatedReplicas: 3, UpdateRevision: "b", CurrentRevision: "b"}), false, false},
		"statefulset: rolling, complete":                 {statefulSet(2, 3, rollingSTS, appsv1.StatefulSetStatus{ObservedGeneration: 2, ReadyReplicas: 3, UpdatedReplicas: 3, UpdateRevision: "b", CurrentRevision: "b"}), true, false},
		"statefulset: on delete":                         {statefulSet(2, 3, onDeleteSTS, appsv1.StatefulSetStatus{ObservedGeneration: 1, ReadyReplicas: 3, UpdateRevision: "b", CurrentRevision: "a"}), true, false},
		"statefulset: partition 2 of 3, one updated":     {statefulSet(2, 3, partitioned(2), appsv1.StatefulSetStatus{ObservedGeneration: 2, ReadyReplicas: 3, UpdatedReplicas: 1, UpdateRevision: "b", CurrentRevision: "a"}), true, false},
		"statefulset: partition 1 of 3, one updated":     {statefulSet(2, 3, partitioned(1), appsv1.StatefulSetStatus{ObservedGeneration: 2, ReadyReplicas: 3, UpdatedReplicas: 1, UpdateRevision: "b", CurrentRevision: "a"}), false, false},
		"statefulset: partition 3 of 3 (canary held)":    {statefulSet(2, 3, partitioned(3), appsv1.StatefulSetStatus{ObservedGeneration: 2, ReadyReplicas: 3, UpdateRevision: "b", CurrentRevision: "a"}), true, false},
		"statefulset: scaled 3 to 5, new pods not ready": {statefulSet(3, 5, rollingSTS, appsv1.StatefulSetStatus{ObservedGeneration: 3, ReadyReplicas: 3, UpdatedReplicas: 5, UpdateRevision: "b", CurrentRevision: "b"}), false, false},
		// DaemonSet.
		"daemonset: rolling, not observed": {daemonSet(2, appsv1.RollingUpdateDaemonSetStrategyType, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}), false, false},
		"daemonset: rolling, updating":     {daemonSet(2, appsv1.RollingUpdateDaemonSetStrategyType, appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 1, NumberAvailable: 2}), false, false},
		"daemonset: new node joining":      {daemonSet(2, appsv1.RollingUpdateDaemonSetStrategyType, appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 2, NumberUnavailable: 1}), false, false},
		"daemonset: rolling, complete":     {daemonSet(2, appsv1.RollingUpdateDaemonSetStrategyType, appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}), true, false},
		"daemonset: on delete":             {daemonSet(2, appsv1.OnDeleteDaemonSetStrategyType, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 2}), true, false},
		// Its pods judged: every node done but a NotReady one, where its
		// pod cannot be replaced (Verification.NotWaitedFor).
		"daemonset: the rest on a NotReady node":               {daemonSet(2, appsv1.RollingUpdateDaemonSetStrategyType, appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 2, NumberAvailable: 2, NumberUnavailable: 1}), true, false},
		"daemonset: not observed, the rest on a NotReady node": {daemonSet(2, appsv1.RollingUpdateDaemonSetStrategyType, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 2, NumberAvailable: 2, NumberUnavailable: 1}), false, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var v Verification
			if strings.Contains(name, "NotReady node") {
				v.NotWaitedFor = []string{"down"}
			}
			complete, ex := Complete(builtin(tc.obj), tc.obj, v)
			if complete != tc.complete || ex != tc.exceededWant {
				t.Fatalf("Complete = (%v, exceeded %v), want (%v, %v)", complete, ex, tc.complete, tc.exceededWant)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	updating := deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 1, AvailableReplicas: 3})
	hugeDeadline := deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 1, AvailableReplicas: 3},
		func(d *appsv1.Deployment) { d.Spec.ProgressDeadlineSeconds = ptr.To[int32](2147483647) })
	sts := statefulSet(2, 3, rollingSTS, appsv1.StatefulSetStatus{ObservedGeneration: 2, ReadyReplicas: 2, UpdateRevision: "b", CurrentRevision: "a"})
	complete := deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 3})
	unavailableNow := deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 2,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable"}}})
	pausedDeployment := deployment(2, 3, appsv1.DeploymentStatus{}, func(d *appsv1.Deployment) { d.Spec.Paused = true })
	rolling := Record{State: Rolling, Started: t0}
	verifying := Record{State: Verifying, Started: t0, Until: t0.Add(time.Minute)}
	window := Verification{Window: 30 * time.Second}
	tests := map[string]struct {
		obj     client.Object
		rec     Record
		v       Verification
		elapsed time.Duration
		want    Trigger
		reason  string
		// progressed: when its status last changed (zero: not seen).
		progressed time.Time
	}{
		"rolling, a pod that cannot run fails at once": {updating, rolling, Verification{Window: 30 * time.Second, Problem: "pod p: container app cannot run, CreateContainerConfigError"},
			2 * time.Second, RolloutFailed, "its new pods failed: pod p: container app cannot run", time.Time{}},
		"slow but progressing: the deadline counts from the last progress": {updating, rolling, window, 40 * time.Second, Progressing, "", t0.Add(20 * time.Second)},
		"no progress for the deadline since: failed":                       {updating, rolling, window, 51 * time.Second, RolloutFailed, "no progress", t0.Add(20 * time.Second)},
		"complete, no window, pods unread: not completed unseen":           {complete, rolling, Verification{Unread: true}, time.Second, Progressing, "", time.Time{}},
		"complete, no window, a pod crashed: failure":                      {complete, rolling, Verification{Problem: "pod p: container app exited"}, time.Second, RolloutFailed, "pod p", time.Time{}},
		"pending within the deadline":                                      {updating, rolling, window, 10 * time.Second, Progressing, "", time.Time{}},
		"past the deadline, stalled by NotReady nodes in its controller":   {updating, rolling, Verification{Window: 30 * time.Second, StalledBy: []string{"down"}}, time.Hour, Progressing, "", time.Time{}},
		"stalled by nodes, and a pod that cannot run: failure": {updating, rolling, Verification{Window: 30 * time.Second, StalledBy: []string{"down"},
			Problem: "pod p: container app exited"}, time.Hour, RolloutFailed, "pod p", time.Time{}},
		"failed at the deadline, whatever its own":      {hugeDeadline, rolling, window, 31 * time.Second, RolloutFailed, "deadline", time.Time{}},
		"statefulset failed at the deadline":            {sts, rolling, window, 31 * time.Second, RolloutFailed, "deadline", time.Time{}},
		"exceeded its own deadline before ours":         {deployment(2, 3, appsv1.DeploymentStatus{ObservedGeneration: 2}, exceeded), rolling, window, time.Second, RolloutFailed, "ProgressDeadlineExceeded", time.Time{}},
		"complete after our deadline is still complete": {complete, rolling, Verification{}, time.Hour, RolloutVerified, "", time.Time{}},
		"complete with a window: verify it":             {complete, rolling, window, time.Second, RolloutComplete, "", time.Time{}},
		"paused: nothing rolls, nothing to verify":      {pausedDeployment, rolling, window, time.Second, RolloutVerified, "", time.Time{}},
		"verifying, healthy: pending":                   {complete, verifying, window, 30 * time.Second, Progressing, "", time.Time{}},
		"verifying, healthy past the window: done":      {complete, verifying, window, time.Minute, RolloutVerified, "", time.Time{}},
		"verifying, a pod crashed: failure":             {complete, verifying, Verification{Window: time.Minute, Problem: "pod p: container app restarted 1 times"}, 30 * time.Second, RolloutFailed, "pod p: container app restarted", time.Time{}},
		"verifying, a crash at the window's end fails":  {complete, verifying, Verification{Window: time.Minute, Problem: "pod p: container app exited"}, time.Hour, RolloutFailed, "pod p", time.Time{}},
		"verifying, Available False alone (a scale-up)": {unavailableNow, verifying, window, 30 * time.Second, Progressing, "", time.Time{}},
		"verifying, pods unread at the end: not done":   {complete, verifying, Verification{Window: time.Minute, Unread: true}, time.Hour, Progressing, "", time.Time{}},
		"verifying past the deadline is no failure":     {complete, verifying, window, 59 * time.Second, Progressing, "", time.Time{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			j := Judge(builtin(tc.obj), tc.obj, tc.rec, tc.v, 30*time.Second, tc.progressed, t0.Add(tc.elapsed))
			if j.Trigger != tc.want || !strings.Contains(j.Reason, tc.reason) {
				t.Fatalf("verdict %v (%s), want %v (%s)", j.Trigger, j.Reason, tc.want, tc.reason)
			}
			due := t0.Add(30 * time.Second) // the deadline, or the window's end
			if tc.rec.State == Verifying {
				due = tc.rec.Until
			}
			if !tc.progressed.IsZero() && tc.rec.State == Rolling {
				due = tc.progressed.Add(30 * time.Second)
			}
			// Judged again just after the deadline or the window's end, or
			// sooner at the next poll of its pods.
			if left := due.Sub(t0.Add(tc.elapsed)); j.Trigger == Progressing && left > 0 &&
				(j.Recheck <= 0 || j.Recheck > left+time.Second || (j.Recheck <= left && j.Recheck > PodPollMax)) {
				t.Fatalf("pending recheck %v: must fall just after %v, or at a poll (at most %v)", j.Recheck, left, PodPollMax)
			}
		})
	}
}

func TestNothingToWaitFor(t *testing.T) {
	for obj, want := range map[client.Object]bool{
		statefulSet(1, 1, onDeleteSTS, appsv1.StatefulSetStatus{}):                        true,
		statefulSet(1, 2, partitioned(1), appsv1.StatefulSetStatus{}):                     false,
		statefulSet(1, 1, partitioned(1), appsv1.StatefulSetStatus{}):                     true, // a partition at replicas replaces no pod
		statefulSet(1, 0, rollingSTS, appsv1.StatefulSetStatus{}):                         true,
		deployment(1, 0, appsv1.DeploymentStatus{}):                                       true, // replicas: 0
		daemonSet(1, appsv1.OnDeleteDaemonSetStrategyType, appsv1.DaemonSetStatus{}):      true,
		daemonSet(1, appsv1.RollingUpdateDaemonSetStrategyType, appsv1.DaemonSetStatus{}): false,
		deployment(1, 1, appsv1.DeploymentStatus{}):                                       false,
	} {
		if got := builtin(obj).Status(obj).NothingToWaitFor; got != want {
			t.Errorf("%T %+v: NothingToWaitFor = %v, want %v", obj, obj, got, want)
		}
	}
}

// builtin is the built-in kind of obj.
func builtin(obj client.Object) workload.Kind {
	k, _ := workload.NewRegistry().Of(obj)
	return k
}
