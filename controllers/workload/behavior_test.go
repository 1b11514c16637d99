package workload

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What each kind's Behavior reads of its spec and status beyond completion
// (tested with the rollout's judgement in package rollout): the progress
// mark, the ready and available counts, minReadySeconds, a paused
// Deployment, the failed reason.
func TestBehaviorStatus(t *testing.T) {
	kinds := NewRegistry(Custom(mustParse(t, argo)[0]))
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(3)), MinReadySeconds: 10, Paused: true},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 2, ReadyReplicas: 3, AvailableReplicas: 1}}
	exceeded := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: appsv1.DeploymentStatus{ObservedGeneration: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: "False", Reason: "ProgressDeadlineExceeded"}}}}
	sts := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{MinReadySeconds: 10},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 2, CurrentReplicas: 1, AvailableReplicas: 2, UpdateRevision: "r2"}}
	ds := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{MinReadySeconds: 5},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 4, UpdatedNumberScheduled: 3, NumberReady: 2, NumberAvailable: 1, NumberUnavailable: 3}}
	recreate := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(5)), Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}},
		Status: appsv1.DeploymentStatus{Replicas: 5, UpdatedReplicas: 5, ReadyReplicas: 5, AvailableReplicas: 5}}
	degraded := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"name": "r", "generation": int64(1)}, "status": map[string]any{"observedGeneration": "1", "phase": "Degraded"}}}
	for name, tc := range map[string]struct {
		obj  client.Object
		want Status
	}{
		"deployment, paused": {dep, Status{Complete: true, Paused: true, Mark: "2 3 2 3 1", Ready: 3, Available: 1, MinReady: 10 * time.Second}},
		"deployment, deadline exceeded": {exceeded, Status{Exceeded: true, FailedReason: "its progress deadline was exceeded (ProgressDeadlineExceeded)",
			Mark: "1 0 0 0 0"}},
		// OrderedReady, the default, keeps a broken pod (kubernetes/kubernetes#67250).
		"statefulset": {sts, Status{Mark: "1 2 1 2 1 2r2" /* fmt.Sprint puts no space before a string, as the mark always was */, Ready: 2, Available: 2, KeepsBrokenPods: true}},
		// Its three old pods not available are replaced at once, beside the one a hold allows.
		"daemonset": {ds, Status{Observed: true, Mark: "1 4 3 2 1", Ready: 2, Available: 1, MinReady: 5 * time.Second, CanaryPods: 4}},
		// Recreate replaces every pod at once: a canary of it costs all five.
		"deployment, Recreate": {recreate, Status{Complete: true, Mark: "0 5 5 5 5", Ready: 5, Available: 5, CanaryPods: 5}},
		"extra kind, degraded": {degraded, Status{Exceeded: true, FailedReason: `its status.phase reports the failed phase "Degraded"`,
			Mark: "map[observedGeneration:1 phase:Degraded]"}},
	} {
		t.Run(name, func(t *testing.T) {
			k, ok := kinds.Of(tc.obj)
			if !ok {
				t.Fatalf("no kind for %T", tc.obj)
			}
			if got := k.Status(tc.obj); got != tc.want {
				t.Fatalf("Status = %+v\nwant     %+v", got, tc.want)
			}
		})
	}
	if got := (Kind{}).Status(dep); got != (Status{Complete: true}) {
		t.Fatalf("the zero Kind's Status = %+v, want complete", got)
	}
	if got := deploymentKind.Status(sts); got != (Status{Complete: true}) {
		t.Fatalf("a Deployment's Status of a StatefulSet = %+v, want complete", got)
	}
}

// Where each kind's revisions are, and how they are numbered.
func TestBehaviorRevisions(t *testing.T) {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"deployment.kubernetes.io/revision": "7"}}}
	cr := &appsv1.ControllerRevision{Revision: 4}
	if _, ok := deploymentKind.Revisions().(*appsv1.ReplicaSetList); !ok || deploymentKind.RevisionNumber(rs) != 7 {
		t.Fatalf("Deployment: %T, revision %d", deploymentKind.Revisions(), deploymentKind.RevisionNumber(rs))
	}
	for _, k := range []Kind{statefulSetKind, daemonSetKind} {
		if _, ok := k.Revisions().(*appsv1.ControllerRevisionList); !ok || k.RevisionNumber(cr) != 4 {
			t.Fatalf("%s: %T, revision %d", k.Name, k.Revisions(), k.RevisionNumber(cr))
		}
	}
	if l := Custom(mustParse(t, argo)[0]).Revisions(); l != nil {
		t.Fatalf("an extra kind's revisions: %T, want none", l)
	}
	if (Kind{}).PodTemplate(&appsv1.Deployment{}) != nil || (Kind{}).Revisions() != nil {
		t.Fatal("the zero Kind has a template or revisions")
	}
}

func mustParse(t *testing.T, yaml string) []KindConfig {
	t.Helper()
	kinds, err := ParseKindsConfig([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return kinds
}
