package main

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/controllers/rollout"
)

// While configstamp's undo rolls (the undone revision is a rollback as the
// webhook sees it too), `why` says it is configstamp's undo, followed,
// not a user's rollback kept until a source changes.
func TestWhySaysAnUndoIsFollowed(t *testing.T) {
	r := whyResult{Kind: "Deployment", Name: "u", State: "rolling", UndoTo: "v1-good", RolledBackTo: "v1-good", Halted: []change{{Source: "ConfigMap/shared", Content: "00aa"}}}
	if s := summary(r); !strings.HasPrefix(s, "undoing:") || !strings.Contains(s, "v1-good") || !strings.Contains(s, "never undone again") {
		t.Fatalf("summary %q: want the undo named, followed, and never undone again", s)
	}
	r.UndoTo, r.State = "", "failed"
	if s := summary(r); !strings.HasPrefix(s, "rolled back") {
		t.Fatalf("summary %q once the undo's rollout ended: want the rollback it runs", s)
	}
}

// In a ring above 0, a workload told that its change is halted while no
// workload of its namespace halts it waits on ring 0: why says so, and its
// ring, without naming ring 0's workload or namespace.
func TestWhyNamesTheRingThatHolds(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	d := deployment("web", map[string]string{rollout.AnnotationState: "completed", rollout.AnnotationStarted: now.Add(-time.Hour).Format(time.RFC3339)})
	halted := configstampEvent(d, "RolloutHalted", "not rolling out: the change ConfigMap/ca@0a1b2c3d failed on another workload; the halt lifts when ...", now.Add(-time.Minute))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{rollout.LabelRing: "2"}}}
	o, out := fakeCluster(t, now, ns, d, halted)
	if err := runWhy(t.Context(), o, []string{"deployment/web"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Ring:", "2: a change of a source copied into lower rings waits for them",
		"waiting: the change ConfigMap/ca@0a1b2c3d failed on a workload of ring 0; it rolls once that halt is lifted there"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("why says:\n%s\nwant %q", out, want)
		}
	}
}
