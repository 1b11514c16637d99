package controllers

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/controllers/rollout"
)

// A Namespace whose ring label is not a ring is told on its workloads (a
// Warning InvalidValue, with the other bad values observe finds), and puts
// the namespace in no ring; a good one says nothing.
func TestABadRingLabelIsTold(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	for value, want := range map[string]string{"first": "namespace label " + rollout.LabelRing + `: "first" is not a whole number from 0 to 99`, "1": ""} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{rollout.LabelRing: value}}}
		_, problems := canaryWanted(d, ns, true, nil)
		var got []string
		for _, p := range problems {
			got = append(got, p.String())
		}
		if text := strings.Join(got, "; "); (want == "") != (text == "") || !strings.Contains(text, want) {
			t.Errorf("ring label %q: problems %q; want %q", value, text, want)
		}
	}
}
