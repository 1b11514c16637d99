package rollout

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// TestUnmountable: what of a template's volumes the kubelet cannot mount
// with the sources as configstamp hashed them — a source gone, an items key
// gone — and nothing optional, nothing present, nothing unknown.
func TestUnmountable(t *testing.T) {
	cm := func(name string, keys ...string) stamp.Source {
		src := stamp.Source{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: name}, Present: true, Digests: map[string]string{}}
		for _, k := range keys {
			src.Digests[k] = "d"
		}
		return src
	}
	secret := cm("tls", "tls.crt")
	secret.Ref.Kind = stamp.KindSecret
	combined := cm("huge", "")
	combined.Combined = true
	ignored := cm("skipped")
	ignored.Ignored = true
	sources := map[stamp.ObjectRef]stamp.Source{}
	for _, s := range []stamp.Source{cm("app", "a"), secret, combined, ignored, stamp.AbsentSource(stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "gone"})} {
		sources[s.Ref] = s
	}
	items := func(keys ...string) []corev1.KeyToPath {
		var out []corev1.KeyToPath
		for _, k := range keys {
			out = append(out, corev1.KeyToPath{Key: k, Path: k})
		}
		return out
	}
	cmVolume := func(name, source string, optional *bool, keys ...string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: source}, Items: items(keys...), Optional: optional}}}
	}
	tests := map[string]struct {
		volumes []corev1.Volume
		want    []string
	}{
		"a key that exists":               {[]corev1.Volume{cmVolume("cfg", "app", nil, "a")}, nil},
		"no items: every key, any key":    {[]corev1.Volume{cmVolume("cfg", "app", nil)}, nil},
		"an items key gone":               {[]corev1.Volume{cmVolume("cfg", "app", nil, "a", "b")}, []string{`volume "cfg" needs key "b" of ConfigMap/app, which ConfigMap/app does not have`}},
		"an optional volume's key gone":   {[]corev1.Volume{cmVolume("cfg", "app", ptr.To(true), "b")}, nil},
		"optional: false is required":     {[]corev1.Volume{cmVolume("cfg", "app", ptr.To(false), "b")}, []string{`key "b"`}},
		"the source gone":                 {[]corev1.Volume{cmVolume("cfg", "gone", nil)}, []string{`volume "cfg" needs ConfigMap/gone, which does not exist`}},
		"an optional source gone":         {[]corev1.Volume{cmVolume("cfg", "gone", ptr.To(true), "a")}, nil},
		"a source beyond the key digests": {[]corev1.Volume{cmVolume("cfg", "huge", nil, "b")}, nil},
		"a source configstamp ignores":    {[]corev1.Volume{cmVolume("cfg", "skipped", nil, "b")}, nil},
		"a source not resolved":           {[]corev1.Volume{cmVolume("cfg", "unknown", nil, "b")}, nil},
		"a Secret's key gone": {[]corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "tls", Items: items("tls.crt", "tls.key")}}}}, []string{`volume "certs" needs key "tls.key" of Secret/tls, which Secret/tls does not have`}},
		"a projected ConfigMap's and Secret's keys gone": {[]corev1.Volume{{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Items: items("a", "c")}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Items: items("d"), Optional: ptr.To(true)}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "tls"}, Items: items("ca.crt")}},
				{DownwardAPI: &corev1.DownwardAPIProjection{}},
			}}}}}, []string{`volume "all" needs key "c" of ConfigMap/app`, `volume "all" needs key "ca.crt" of Secret/tls`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Unmountable(&corev1.PodSpec{Volumes: tc.volumes}, sources)
			if len(got) != len(tc.want) {
				t.Fatalf("Unmountable = %q, want %q", got, tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("Unmountable[%d] = %q, want %q in it", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestInspectPodsVolumeKeyGone: a pod of the new revision that waits for its
// volumes fails the rollout once it has waited MountGrace and its template
// needs what its sources lack — not before, not when nothing is missing, not
// once its containers ran or its sandbox is up.
func TestInspectPodsVolumeKeyGone(t *testing.T) {
	scheduled := t0.Add(time.Second)
	missing := []string{`volume "cfg" needs key "b" of ConfigMap/app, which ConfigMap/app does not have`}
	waiting := func(mutate ...func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-1", CreationTimestamp: metav1.NewTime(t0), Annotations: map[string]string{stamp.AnnotationHash: "v1-new"}},
			Spec:       corev1.PodSpec{NodeName: "node-a"},
			Status: corev1.PodStatus{Phase: corev1.PodPending,
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(scheduled)},
					{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(scheduled)},
					{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(scheduled)},
				},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}},
		}
		for _, m := range mutate {
			m(&p)
		}
		return p
	}
	after := scheduled.Add(MountGrace)
	tests := map[string]struct {
		pod     corev1.Pod
		missing []string
		now     time.Time
		want    string
		judgeAt time.Time
	}{
		"waited past the grace, a key gone": {waiting(), missing, after, `pod web-1: cannot start: it has waited in ContainerCreating since ` + scheduled.UTC().Format(time.RFC3339) +
			` and the kubelet cannot mount its volumes (FailedMount): volume "cfg" needs key "b" of ConfigMap/app`, after},
		"within the grace: judged at its end":         {waiting(), missing, after.Add(-time.Second), "", after},
		"nothing missing: an image pull, a slow node": {waiting(), nil, after.Add(time.Hour), "", time.Time{}},
		"its sandbox is up: the volumes are mounted":  {waiting(func(p *corev1.Pod) { p.Status.Conditions[1].Status = corev1.ConditionTrue }), missing, after, "", time.Time{}},
		"init containers: PodInitializing": {waiting(func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Waiting.Reason = "PodInitializing"
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
		}), missing, after, "cannot start", after},
		"a container ran: not a mount": {waiting(func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(scheduled)}}
			p.Status.Phase = corev1.PodRunning
		}), missing, after, "", scheduled.Add(readyMargin)}, // judged by its probes' budget instead
		"not yet seen by a kubelet": {waiting(func(p *corev1.Pod) { p.Status.ContainerStatuses = nil }), missing, after, "", time.Time{}},
		"another revision's pod":    {waiting(func(p *corev1.Pod) { p.Annotations[stamp.AnnotationHash] = "v1-old" }), missing, after, "", time.Time{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, rule := range []Rule{RuleRolling, RuleVerifying} {
				v := InspectPods(PodsSeen{Rule: rule, Pods: []corev1.Pod{tc.pod}, Hash: "v1-new", Started: t0, Now: tc.now, Unmountable: tc.missing})
				if (tc.want == "") != (v.Problem == "") || !strings.Contains(v.Problem, tc.want) {
					t.Errorf("rule %d: Problem = %q, want %q", rule, v.Problem, tc.want)
				}
				if tc.want == "" && !v.JudgeAt.Equal(tc.judgeAt) {
					t.Errorf("rule %d: JudgeAt = %v, want %v", rule, v.JudgeAt, tc.judgeAt)
				}
			}
			_, waits := waitingForVolumes(&tc.pod)
			if got := WaitsForVolumes([]corev1.Pod{tc.pod}, "v1-new"); got != (waits && tc.pod.Annotations[stamp.AnnotationHash] == "v1-new") {
				t.Errorf("WaitsForVolumes = %v", got)
			}
		})
	}
	// A rollout failed or completed is not judged by it.
	for _, rule := range []Rule{RuleLasting, RuleCrashing} {
		if v := InspectPods(PodsSeen{Rule: rule, Pods: []corev1.Pod{waiting()}, Hash: "v1-new", Started: t0, Now: after, Unmountable: missing}); v.Problem != "" {
			t.Errorf("rule %d: Problem = %q", rule, v.Problem)
		}
	}
}
