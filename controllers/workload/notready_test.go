package workload

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// TestDaemonSetNotWaitedFor: a DaemonSet's rollout is complete once every
// pod on a Ready node is updated and available; pods on NotReady nodes
// (which cannot be replaced there) are not waited for. A Ready node not done,
// a node unread, or a status that still misses a Ready node is waited for.
func TestDaemonSetNotWaitedFor(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := func(node, hash string, ready bool, mutate ...func(*corev1.Pod)) corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node + "-" + hash, Annotations: map[string]string{stamp.AnnotationHash: hash},
			CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))},
			Spec: corev1.PodSpec{NodeName: node, Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-30 * time.Second))}}}}
		for _, m := range mutate {
			m(&p)
		}
		return p
	}
	toleratesAllTaints := func(p *corev1.Pod) { p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}} }
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Minute)} }
	notReadyTaints := []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}, {Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}
	nodes := map[string]NodeState{"a": {Ready: true}, "b": {Ready: true}, "down": {Taints: notReadyTaints}}
	ds := func(desired, updated, available int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: appsv1.DaemonSetStatus{ObservedGeneration: 2,
			DesiredNumberScheduled: desired, UpdatedNumberScheduled: updated, NumberAvailable: available}}
	}
	tests := map[string]struct {
		ds    *appsv1.DaemonSet
		pods  []corev1.Pod
		nodes map[string]NodeState
		want  []string
	}{
		"its old pod on a NotReady node it does not count (not tolerated)": {ds(2, 2, 2),
			[]corev1.Pod{pod("a", "new", true), pod("b", "new", true), pod("down", "old", false)}, nodes, []string{"down"}},
		"its old pod stuck terminating on a NotReady node it counts": {ds(3, 2, 2),
			[]corev1.Pod{pod("a", "new", true), pod("b", "new", true), pod("down", "old", true, toleratesAllTaints, deleting)}, nodes, []string{"down"}},
		"a new pod that never ran on a NotReady node it counts": {ds(3, 3, 2),
			[]corev1.Pod{pod("a", "new", true), pod("b", "new", true), pod("down", "new", false, toleratesAllTaints)}, nodes, []string{"down"}},
		"a Ready node not updated yet": {ds(3, 1, 2),
			[]corev1.Pod{pod("a", "new", true), pod("b", "old", true), pod("down", "old", false, toleratesAllTaints)}, nodes, nil},
		"a Ready node's new pod not available": {ds(3, 2, 1),
			[]corev1.Pod{pod("a", "new", true), pod("b", "new", false), pod("down", "old", false, toleratesAllTaints)}, nodes, nil},
		"a Ready node with no pod yet (the status misses it)": {ds(3, 1, 1),
			[]corev1.Pod{pod("a", "new", true), pod("down", "old", false)}, nodes, nil},
		"the node unread": {ds(2, 1, 1),
			[]corev1.Pod{pod("a", "new", true), pod("down", "old", false, toleratesAllTaints)}, map[string]NodeState{"a": {Ready: true}}, nil},
		"the template not observed yet": {&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 1, UpdatedNumberScheduled: 1, NumberAvailable: 1}},
			[]corev1.Pod{pod("a", "new", true), pod("down", "old", false)}, nodes, nil},
		"every node done: nothing to say": {ds(2, 2, 2), []corev1.Pod{pod("a", "new", true), pod("b", "new", true)}, nodes, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			unfinished := (daemonSetNodes{tc.ds}).Unfinished(tc.pods, "new", now)
			got := (daemonSetNodes{tc.ds}).NotWaitedFor(tc.pods, "new", unfinished, tc.nodes)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("DaemonSetNotWaitedFor = %v (unfinished %v), want %v", got, unfinished, tc.want)
			}
			observed := tc.ds.Status.ObservedGeneration >= tc.ds.Generation
			plain := tc.ds.Status.UpdatedNumberScheduled >= tc.ds.Status.DesiredNumberScheduled && tc.ds.Status.NumberAvailable >= tc.ds.Status.DesiredNumberScheduled && observed
			// Complete without the nodes not waited for: rollout.StatusSeen.
			if st := (daemonSet{}).Status(tc.ds); st.Complete != plain || st.Observed != observed || (len(got) > 0 && !observed) {
				t.Errorf("Status = %+v: want Complete %v, Observed %v", st, plain, observed)
			}
		})
	}
}

// TestDaemonSetUnfinishedMinReadySeconds: a new pod Ready for less than
// minReadySeconds is not done yet.
func TestDaemonSetUnfinishedMinReadySeconds(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{MinReadySeconds: 60}}
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{stamp.AnnotationHash: "new"}}, Spec: corev1.PodSpec{NodeName: "a"},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-30 * time.Second))}}}}
	if got := (daemonSetNodes{d}).Unfinished([]corev1.Pod{p}, "new", now); !slices.Equal(got, []string{"a"}) {
		t.Errorf("unfinished = %v, want [a]", got)
	}
	if got := (daemonSetNodes{d}).Unfinished([]corev1.Pod{p}, "new", now.Add(time.Minute)); len(got) != 0 {
		t.Errorf("unfinished a minute later = %v, want none", got)
	}
}

// TestDaemonSetStalledBy: without surge, NotReady nodes that use up
// maxUnavailable stall the DaemonSet controller while Ready nodes still wait
// (kubernetes/kubernetes#117204); more budget, a surge, no Ready node left
// waiting, an unread node or a status of an older template stall nothing.
func TestDaemonSetStalledBy(t *testing.T) {
	ds := func(mutate func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 2},
			Spec:   appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3}}
		if mutate != nil {
			mutate(d)
		}
		return d
	}
	two, pct, surge := intstr.FromInt32(2), intstr.FromString("10%"), intstr.FromInt32(1)
	nodes := map[string]NodeState{"down": {}, "down2": {}, "up": {Ready: true}}
	tests := []struct {
		name       string
		d          *appsv1.DaemonSet
		unfinished []string
		want       []string
	}{
		{"maxUnavailable 1 (default), one node down, one Ready left: stalled", ds(nil), []string{"down", "up"}, []string{"down"}},
		{"10% of 3 rounds up to 1: stalled", ds(func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &pct}
		}), []string{"down", "up"}, []string{"down"}},
		{"maxUnavailable 2, one node down: the controller goes on", ds(func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &two}
		}), []string{"down", "up"}, nil},
		{"maxUnavailable 2, two nodes down: stalled", ds(func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &two}
		}), []string{"down", "down2", "up"}, []string{"down", "down2"}},
		{"a surge: new pods come first, nothing stalls", ds(func(d *appsv1.DaemonSet) {
			zero := intstr.FromInt32(0)
			d.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxSurge: &surge, MaxUnavailable: &zero}
		}), []string{"down", "up"}, nil},
		{"no Ready node left waiting: not a stall (DaemonSetNotWaitedFor)", ds(nil), []string{"down"}, nil},
		{"a node unread: not known", ds(nil), []string{"gone", "up"}, nil},
		{"status of an older template", ds(func(d *appsv1.DaemonSet) { d.Status.ObservedGeneration = 1 }), []string{"down", "up"}, nil},
		{"OnDelete: nothing to stall", ds(func(d *appsv1.DaemonSet) { d.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType }),
			[]string{"down", "up"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := (daemonSetNodes{tc.d}).StalledBy(tc.unfinished, nodes); !slices.Equal(got, tc.want) {
				t.Fatalf("stalled by %v, want %v", got, tc.want)
			}
		})
	}
}

// A DaemonSet its controller schedules on no node (a node selector no node
// matches) can make no pod of a new template: it has nothing to wait for,
// so it is never its change's canary (it would hold the wave until its
// slot's bound, passing on no pod). Not yet observed, or on a node, it has.
// A stamp (a newer generation not observed yet) changes nothing of that.
func TestDaemonSetOnNoNodeHasNothingToWaitFor(t *testing.T) {
	ds := func(observed, generation int64, desired, current int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: generation},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: observed, DesiredNumberScheduled: desired, CurrentNumberScheduled: current}}
	}
	for _, tc := range []struct {
		name string
		ds   *appsv1.DaemonSet
		want bool
	}{
		{"on no node", ds(1, 1, 0, 0), true},
		{"on no node, just stamped", ds(1, 2, 0, 0), true},
		{"not observed yet", ds(0, 1, 0, 0), false},
		{"on two nodes", ds(1, 1, 2, 2), false},
		{"its last pod being removed", ds(1, 1, 0, 1), false},
	} {
		if got := (daemonSet{}).Status(tc.ds).NothingToWaitFor; got != tc.want {
			t.Errorf("%s: NothingToWaitFor %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Of the built-in kinds only a DaemonSet rolls node by node (Kind.Nodes),
// and an object of another kind has no per-node rollout.
func TestOnlyADaemonSetRollsNodeByNode(t *testing.T) {
	for _, k := range NewRegistry().All() {
		if got := k.Nodes(k.New()) != nil; got != (k.Name == "DaemonSet") {
			t.Errorf("%s: a per-node rollout %v", k.Name, got)
		}
		if k.Name == "DaemonSet" && k.Nodes(&appsv1.Deployment{}) != nil {
			t.Error("a Deployment read as a DaemonSet has a per-node rollout")
		}
	}
}
