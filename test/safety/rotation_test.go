package safety

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// TestARotationOfTwoSecretsRollsOnce: a workload reads a user name and a
// password from two Secrets that one rotation in a secret store changes,
// each written on its own refresh (the External Secrets Operator's). With
// configstamp.io/rotate-together naming both, the first write, applied
// with kubectl, rolls nothing; the second, 20 s later, rolls the workload
// once, with both: one new ReplicaSet. A rotation that stays half done
// rolls what changed when the group's wait runs out, not before, with a
// Warning RotationIncomplete.
func TestARotationOfTwoSecretsRollsOnce(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.Namespace(t, "rotation", nil)
	dep := framework.RotatingApp(ns, 3)
	secrets := func(user, password string) (*corev1.Secret, *corev1.Secret) {
		return framework.Secret(ns, "db-user", map[string]string{"DB_USER": user}),
			framework.Secret(ns, "db-password", map[string]string{"DB_PASSWORD": password})
	}
	u0, p0 := secrets("app-0", "pw-0")
	env.Apply(t, u0, p0, dep)
	waitComplete(t, ns, "app")
	env.Get(t, dep)
	h0 := framework.TemplateHash(dep)

	u1, p1 := secrets("app-1", "pw-1")
	env.Apply(t, u1)
	unchangedFor(t, dep, h0, 20*time.Second) // the password's refresh comes 20 s later
	env.Apply(t, p1)
	env.WaitTemplateHash(t, dep, h0)
	waitComplete(t, ns, "app")
	if n := replicaSets(t, ns, "app"); n != 2 {
		t.Fatalf("ReplicaSets after a rotation of two Secrets 20 s apart: %d, want 2 (exactly one new, with both)", n)
	}
	if n := env.CountEvents(t, dep, rollout.ReasonRotationIncomplete); n != 0 {
		t.Errorf("%d %s events for a whole rotation, want none", n, rollout.ReasonRotationIncomplete)
	}

	// Half a rotation, with a 30 s wait: nothing rolls before, then it does, warned.
	env.Kubectl(t, "", "annotate", "-n", ns, "deployment/app", rollout.AnnotationRotateTogetherWait+"=30s")
	env.Get(t, dep)
	h1 := framework.TemplateHash(dep)
	u2, _ := secrets("app-2", "")
	began := time.Now()
	env.Apply(t, u2)
	env.WaitEvent(t, dep, rollout.ReasonRotationIncomplete, "without Secret/db-password")
	env.Get(t, dep)
	if framework.TemplateHash(dep) == h1 {
		t.Fatalf("the template still has %s after the group's wait ran out, want the user Secret's change rolled", h1)
	}
	if d := time.Since(began); d < 30*time.Second {
		t.Errorf("the half rotation rolled %v after it was applied, want no sooner than the group's wait (30 s)", d.Round(100*time.Millisecond))
	}
	t.Logf("half rotation rolled, warned, %v after it was applied", time.Since(began).Round(100*time.Millisecond))
}
