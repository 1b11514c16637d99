//go:build linux

// Package realnode_test runs configstamp against a control plane with a real
// node (kubelet, kube-proxy, containerd and runc; localcp.Options.RealNode):
// tests about what pods do — crash, read their files, become Ready — where
// the containers really run. The test app (test/images/testapp) reads its
// mounted ConfigMap at start and rejects a value containing "bad".
package realnode_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/hack/images"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

// The control plane and its real node are the package's, one for every test
// that needs a real node: the install tests (install_*_test.go) run first,
// one after another, each installing configstamp as a user does and
// uninstalling it; then the others, side by side, each with a configstamp
// of its own (lane).
func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{Plane: framework.RealNode, NoConfigstamp: true, KubeletSyncFrequency: kubeletSync}))
}

// kubeletSync is the node's kubelet syncFrequency. The tests wait for the
// kubelet to rewrite mounted ConfigMaps and Secrets (TestPinnedConfigOnTheNode,
// checkCertManagerRenewal, TestBadChangeStopsAtTheFirstWorkload), which it
// does at each pod's next resync: every syncFrequency plus up to half of it
// as jitter. The kubelet's default, 1m,
// made those waits a minute or more each.
const kubeletSync = 10 * time.Second

// suiteFlags are the settings: pinning installed, one rollout at a
// time, a 90 s progress deadline, no debounce (the verification window is
// the default 30 s).
var suiteFlags = []string{"--pin", "--max-concurrent-rollouts=1", "--progress-deadline=90s", "--debounce=0s"}

// defaultFlags are configstamp's own defaults (a budget of 10, a 10-minute
// progress deadline, a 2 s debounce, a 30 s window, the canary on), with
// pinning installed.
var defaultFlags = []string{"--pin"}

// lane runs the test's own configstamp (framework.Lane) with flags, then
// REALNODE_EXTRA_ARGS (e.g. --canary=false to see the negative checks
// fail).
func lane(t *testing.T, flags ...string) *framework.Lane {
	t.Helper()
	return env.Lane(t, append(slices.Clone(flags), strings.Fields(os.Getenv("REALNODE_EXTRA_ARGS"))...)...)
}

// appOptions shape one test app workload.
type appOptions struct {
	// env: extra APP_* settings (APP_FAIL_MODE, APP_FAIL_AFTER, ...);
	// APP_REJECT "" makes an app that takes every value.
	env map[string]string
	// probe: a readiness probe on the app's /ready.
	probe bool
	// annotations on the workload (pin, rollout-priority).
	annotations map[string]string
	// envKey: the container reads the ConfigMap's key "mode" into
	// APP_VALUE_MODE through a configMapKeyRef (a removed key: the
	// container cannot be created).
	envKey bool
	// initCheck: an init container (the app, APP_ONCE) checks the mounted
	// ConfigMap first and exits 1 on a rejected value.
	initCheck bool
	// liveness: a liveness probe on the app's /ready (1 s period, 2
	// failures): an app unready on the value is killed and restarted.
	liveness bool
	// itemsKey: the ConfigMap volume projects only its key "mode"
	// (items:); a removed key: the volume cannot be mounted and the pod
	// stays ContainerCreating.
	itemsKey bool
}

// appSpec is a pod of the test app reading ConfigMap cm, mounted at /config,
// and rejecting any value that contains "bad".
func appSpec(cm string, o appOptions) corev1.PodSpec {
	vars := []corev1.EnvVar{{Name: "APP_DIRS", Value: "/config"}, {Name: "APP_REJECT", Value: "bad"}}
	for k, v := range o.env { // o.env's value of a variable set above replaces it
		if i := slices.IndexFunc(vars, func(e corev1.EnvVar) bool { return e.Name == k }); i >= 0 {
			vars[i].Value = v
			continue
		}
		vars = append(vars, corev1.EnvVar{Name: k, Value: v})
	}
	c := corev1.Container{
		Name: "app", Image: images.TestAppRef, ImagePullPolicy: corev1.PullNever, Env: vars,
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/config"}},
	}
	ready := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}}
	// The app answers /ready at once, with 503 when it rejects its config; a
	// 5 s timeout keeps a probe answered late on a loaded node (2 cores, the
	// suites side by side) from reading as a failure.
	if o.probe {
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: ready, PeriodSeconds: 1, FailureThreshold: 1, TimeoutSeconds: 5}
	}
	if o.liveness {
		c.LivenessProbe = &corev1.Probe{ProbeHandler: ready, PeriodSeconds: 1, FailureThreshold: 2, TimeoutSeconds: 5}
	}
	if o.envKey {
		c.Env = append(c.Env, corev1.EnvVar{Name: "APP_VALUE_MODE", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: "mode"}}})
	}
	var inits []corev1.Container
	if o.initCheck {
		check := c
		check.Name, check.ReadinessProbe, check.LivenessProbe = "check", nil, nil
		check.Env = append(slices.Clone(c.Env), corev1.EnvVar{Name: "APP_ONCE", Value: "true"})
		inits = append(inits, check)
	}
	volume := &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}
	if o.itemsKey {
		volume.Items = []corev1.KeyToPath{{Key: "mode", Path: "mode"}}
	}
	return corev1.PodSpec{
		InitContainers:                inits,
		Containers:                    []corev1.Container{c},
		Volumes:                       []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: volume}}},
		TerminationGracePeriodSeconds: ptr.To[int64](1),
	}
}

// deployment is an opted-in Deployment of the test app.
func deployment(ns, name, cm string, o appOptions) *appsv1.Deployment {
	d := framework.Deployment(ns, name, framework.OptIn, appSpec(cm, o))
	d.Annotations = o.annotations
	return d
}

// waitReady polls until every pod of obj's current template is Ready and
// the workload's status says so (kubectl rollout status).
func waitReady(t *testing.T, obj client.Object, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, func() (bool, string) {
		env.Get(t, obj)
		ok, why := rolledOut(obj)
		return ok, fmt.Sprintf("%s %s: %s", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), why)
	})
}

func rolledOut(obj client.Object) (bool, string) {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		s := w.Status
		return s.ObservedGeneration >= w.Generation && s.UpdatedReplicas == *w.Spec.Replicas && s.AvailableReplicas == *w.Spec.Replicas && s.Replicas == *w.Spec.Replicas,
			fmt.Sprintf("%+v", s)
	case *appsv1.StatefulSet:
		s := w.Status
		return s.ObservedGeneration >= w.Generation && s.ReadyReplicas == *w.Spec.Replicas && s.UpdateRevision == s.CurrentRevision, fmt.Sprintf("%+v", s)
	case *appsv1.DaemonSet:
		s := w.Status
		return s.ObservedGeneration >= w.Generation && s.DesiredNumberScheduled > 0 && s.UpdatedNumberScheduled == s.DesiredNumberScheduled &&
			s.NumberAvailable == s.DesiredNumberScheduled, fmt.Sprintf("%+v", s)
	}
	return false, "unknown kind"
}

// pods lists the pods of app (label app=name) in ns, not being deleted.
func pods(t *testing.T, ns, app string) []corev1.Pod {
	t.Helper()
	return env.LivePods(t, ns, map[string]string{"app": app})
}

// restarts sums the restart counts of a pod's containers.
func restarts(p corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// appView is what the test app says it read (GET /config: at its start;
// GET /files-now: the mounted files as they are now).
type appView struct {
	Files    map[string]string `json:"files"`
	Rejected bool              `json:"rejected"`
}

// podGet asks the test app in pod p (at its pod IP, in the network
// namespace the node made for it) for path.
func podGet(p corev1.Pod, path string) (appView, error) {
	var v appView
	if p.Status.PodIP == "" {
		return v, fmt.Errorf("pod %s has no IP yet", p.Name)
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.Status.PodIP + ":8080" + path)
	if err != nil {
		return v, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return v, err
	}
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET %s from pod %s: %s: %s", path, p.Name, resp.Status, body)
	}
	return v, json.Unmarshal(body, &v)
}

// record is obj's rollout record as written (its seal is configstamp's to check).
func record(t *testing.T, obj client.Object) rollout.Record {
	t.Helper()
	env.Get(t, obj)
	return rollout.Read(obj.GetAnnotations())
}

// configMap is the shared ConfigMap with mode: value.
func configMap(ns, name, value string) *corev1.ConfigMap {
	return framework.ConfigMap(ns, name, map[string]string{"mode": value}, nil)
}
