package pin

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/test/framework"
)

// TestSnapshotsFollowRevisionHistory: 20 changes of the mounted ConfigMap of
// a pinned Deployment with revisionHistoryLimit 2 leave as many snapshots of
// it as ReplicaSets (at most 3: the current one and 2 old), each owned by a
// ReplicaSet; an undo to the oldest kept revision still finds its snapshot.
func TestSnapshotsFollowRevisionHistory(t *testing.T) {
	ns := withSources(t, "pinhistory", "0")
	d := app(ns, false)
	d.Spec.RevisionHistoryLimit = ptr.To[int32](2)
	env.Apply(t, d)
	waitRolledOut(t, d)
	const changes = 20
	for i := 1; i <= changes; i++ {
		before := framework.TemplateHash(d)
		env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": fmt.Sprint(i)}, nil))
		env.WaitTemplateHash(t, d, before)
		waitRolledOut(t, d)
	}
	snapshotsOfCfg := func() []corev1.ConfigMap {
		list := &corev1.ConfigMapList{}
		if err := env.Client.List(t.Context(), list, client.InNamespace(ns), client.MatchingLabels{pin.SnapshotOf: "cfg"}); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	framework.Eventually(t, time.Minute, func() (bool, string) {
		snaps, rs := snapshotsOfCfg(), len(env.ReplicaSets(t, ns, "app"))
		return len(snaps) == rs && rs <= 3, fmt.Sprintf("%d snapshots of cfg, %d ReplicaSets after %d changes; want as many, at most 3", len(snaps), rs, changes)
	})
	snaps := snapshotsOfCfg()
	for _, s := range snaps {
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "ReplicaSet" {
			t.Errorf("snapshot %s owners %v, want one ReplicaSet", s.Name, s.OwnerReferences)
		}
	}
	t.Logf("after %d changes: %d snapshots of cfg, as many as ReplicaSets (revisionHistoryLimit 2)", changes, len(snaps))

	env.Kubectl(t, "", "rollout", "undo", "-n", ns, "deployment/app", "--to-revision", oldestRevision(t, ns))
	env.Get(t, d)
	if got := configMapData(t, ns, mountedSnapshot(d), "cfg"); got["a"] != fmt.Sprint(changes-2) {
		t.Fatalf("after the undo to the oldest kept revision the Deployment mounts %s holding %v, want a=%d", mountedSnapshot(d), got, changes-2)
	}
	waitRolledOut(t, d)
}

// oldestRevision is the lowest deployment.kubernetes.io/revision among the
// ReplicaSets of app in ns.
func oldestRevision(t *testing.T, ns string) string {
	t.Helper()
	oldest := ""
	for _, rs := range env.ReplicaSets(t, ns, "app") {
		r := rs.Annotations["deployment.kubernetes.io/revision"]
		if oldest == "" || len(r) < len(oldest) || (len(r) == len(oldest) && r < oldest) {
			oldest = r
		}
	}
	return oldest
}
