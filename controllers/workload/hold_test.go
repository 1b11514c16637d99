package workload

import (
	"encoding/json"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A Deployment of three replicas with the API's defaults (25% surge and
// unavailable, no minReadySeconds) is held by a surge of one, none
// unavailable and minReadySeconds of the window and LateReadyMargin; the hold read back from
// its record puts the user's values back, except those the user changed
// since.
func TestDeploymentHoldAndItsRestore(t *testing.T) {
	pct := intstr.FromString("25%")
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(3)),
		Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &pct, MaxUnavailable: &pct}}}}
	h := NewRegistry().All()[0].Hold(d, 30*time.Second)
	got, _ := json.Marshal(h.SetPatch())
	if want := `{"spec":{"minReadySeconds":90,"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":0}}}}`; string(got) != want {
		t.Fatalf("hold %s, want %s", got, want)
	}
	back, err := DecodeHold(h.Encode())
	if err != nil {
		t.Fatal(err)
	}
	// Held as set, then the user sets minReadySeconds 5 meanwhile.
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero}
	d.Spec.MinReadySeconds = 5
	restore, err := back.RestorePatch(d)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = json.Marshal(restore)
	if want := `{"spec":{"strategy":{"rollingUpdate":{"maxSurge":"25%","maxUnavailable":"25%"}}}}`; string(got) != want {
		t.Fatalf("restore %s, want %s (the user's minReadySeconds wins)", got, want)
	}
	// A new canary over the held workload puts back the user's values, not the held ones.
	d.Spec.MinReadySeconds = 90
	again := NewRegistry().All()[0].Hold(d, 30*time.Second).Carry(back, d)
	d.Spec.MinReadySeconds = 90
	restore, _ = again.RestorePatch(d)
	got, _ = json.Marshal(restore)
	if want := `{"spec":{"minReadySeconds":null,"strategy":{"rollingUpdate":{"maxSurge":"25%","maxUnavailable":"25%"}}}}`; string(got) != want {
		t.Fatalf("carried restore %s, want %s", got, want)
	}
}

// What cannot be held is its whole rollout's canary: one replica, Recreate,
// OnDelete, a partition that already holds all but one pod. A user who
// allows no surge is held at one pod unavailable instead.
func TestHoldPerKind(t *testing.T) {
	kinds := NewRegistry().All()
	deploy, sts, ds := kinds[0], kinds[1], kinds[2]
	none := []struct {
		name string
		k    Kind
		obj  client.Object
	}{
		{"one replica", deploy, &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1))}}},
		{"recreate", deploy, &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(3)), Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}}}},
		{"sts ondelete", sts, &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(3)), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}}}},
		{"sts partition", sts, &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(3)), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(int32(2))}}}}},
		{"ds one node", ds, &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 1}}},
	}
	for _, tc := range none {
		if h := tc.k.Hold(tc.obj, time.Minute); len(h) != 0 {
			t.Errorf("%s: hold %+v, want none", tc.name, h)
		}
	}
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	noSurge := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(4)), MinReadySeconds: 120,
		Strategy: appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &zero, MaxUnavailable: &one}}}}
	if h := deploy.Hold(noSurge, 30*time.Second); len(h) != 0 {
		t.Errorf("no surge, one unavailable, minReadySeconds above the window and the margin: hold %+v, want none (it holds itself)", h)
	}
	s := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(3))}}
	got, _ := json.Marshal(sts.Hold(s, time.Minute).SetPatch())
	if want := `{"spec":{"updateStrategy":{"rollingUpdate":{"partition":2}}}}`; string(got) != want {
		t.Errorf("StatefulSet hold %s, want %s", got, want)
	}
}

// A held pod counts available for its workload's controller after the
// window and LateReadyMargin, counted from its Ready's transition time (a
// busy kubelet writes it late); always below a Deployment's progress
// deadline: the API server rejects a minReadySeconds that is not less than
// progressDeadlineSeconds (the "every stamp write is rejected"),
// and the deadline counts from the pod's Ready.
func TestHeldMinReady(t *testing.T) {
	tests := []struct {
		window time.Duration
		limit  int32
		want   int32
	}{
		{30 * time.Second, 600, 90},
		{0, 600, 0},
		{1500 * time.Millisecond, 0, 62},
		{570 * time.Second, 600, 599},
		{10 * time.Minute, 300, 299},
		{30 * time.Second, 60, 59},
		{30 * time.Second, 1, 0},
		{10 * time.Minute, 0, 660},
	}
	for _, tc := range tests {
		if got := HeldMinReady(tc.window, tc.limit); got != tc.want {
			t.Errorf("HeldMinReady(%v, %d) = %d, want %d", tc.window, tc.limit, got, tc.want)
		}
	}
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(3)), ProgressDeadlineSeconds: ptr.To(int32(100))}}
	got, _ := json.Marshal(NewRegistry().All()[0].Hold(d, 30*time.Second).SetPatch())
	if want := `{"spec":{"minReadySeconds":90,"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":0}}}}`; string(got) != want {
		t.Errorf("hold %s, want %s", got, want)
	}
	d.Spec.ProgressDeadlineSeconds = ptr.To(int32(60))
	got, _ = json.Marshal(NewRegistry().All()[0].Hold(d, 30*time.Second).SetPatch())
	if want := `{"spec":{"minReadySeconds":59,"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":0}}}}`; string(got) != want {
		t.Errorf("within a progress deadline of 60 s: hold %s, want %s", got, want)
	}
}

// A failed canary's freeze (spec.paused) is what an undo puts back, in the
// same JSON patch: removed when the user had no value, kept when the user
// paused the Deployment since (it is theirs then); the hold's other fields
// are not the undo's to put back.
func TestThawOps(t *testing.T) {
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(3))}}
	freeze := NewRegistry().All()[0].Freeze(d)
	hold := Hold{{Path: "spec.minReadySeconds", Set: int64(30), Was: nil}}.With(freeze)
	back, err := DecodeHold(hold.Encode())
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Paused, d.Spec.MinReadySeconds = true, 30
	got, _ := json.Marshal(back.ThawOps(d))
	if want := `[{"op":"remove","path":"/spec/paused"}]`; string(got) != want {
		t.Fatalf("thaw %s, want %s", got, want)
	}
	d.Spec.Paused = false // the user resumed it meanwhile
	if ops := back.ThawOps(d); len(ops) != 0 {
		t.Fatalf("thaw %v of a Deployment no longer paused, want none", ops)
	}
	if ops := (Hold{{Path: "spec.paused", Set: true, Was: false}}).ThawOps(&appsv1.Deployment{Spec: appsv1.DeploymentSpec{Paused: true}}); len(ops) != 1 || ops[0]["op"] != "add" || ops[0]["value"] != false {
		t.Fatalf("thaw %v, want spec.paused put back to false", ops)
	}
}
