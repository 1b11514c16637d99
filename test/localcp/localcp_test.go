package localcp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/test/localcp"
)

// TestDeploymentBecomesAvailable starts a Full control plane and checks that a
// Deployment's pod is scheduled onto the kwok node and reported Running/Ready.
func TestDeploymentBecomesAvailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	began := time.Now()
	cp, err := localcp.Start(ctx, localcp.Options{Full: true, Logf: t.Logf})
	if err != nil { // a missing binary is a failure too: the error says to run `make controlplane`
		t.Fatal(err)
	}
	t.Logf("Full control plane started in %s", time.Since(began).Round(time.Millisecond))
	defer func() {
		if t.Failed() {
			for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
				t.Logf("--- last lines of %s ---\n%s", cp.LogPath(c), cp.Tail(c, 30))
			}
		}
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	}()

	cfg, err := cp.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "fake"}}},
			},
		},
	}
	created := time.Now()
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var last string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		if len(pods.Items) != 1 {
			last = fmt.Sprintf("%d pods", len(pods.Items))
			return false, nil
		}
		p := pods.Items[0]
		last = fmt.Sprintf("pod %s on %q phase %s ready %v; deployment available %d",
			p.Name, p.Spec.NodeName, p.Status.Phase, podReady(&p), d.Status.AvailableReplicas)
		return p.Spec.NodeName == localcp.NodeName && p.Status.Phase == corev1.PodRunning &&
			podReady(&p) && d.Status.AvailableReplicas == 1, nil
	})
	if err != nil {
		t.Fatalf("deployment did not become available: %v (last: %s)", err, last)
	}
	t.Logf("deployment available %s after creation: %s", time.Since(created).Round(time.Millisecond), last)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
