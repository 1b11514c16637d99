// Package kinds tests configstamp's extra pod-template kinds (--kinds-config)
// against a real local control plane with the kinds file a user of Argo
// Rollouts applies, config/kinds/argo-rollouts/kinds.yaml, and Argo's own
// Rollout CRD from the argo-rollouts Go module. No Argo controller runs: the
// test writes the status a Rollout controller would write, so it decides when
// a Rollout's rollout completes or fails. Deployments run next to the Rollouts
// (kube-controller-manager and kwok roll them for real), sharing one budget.
package kinds

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

// hashKey is the suite's HMAC key, so the test can compute the stamps a
// Deployment with the same references would get.
var hashKey = []byte("configstamp-kinds-suite-hmac-key!!")

const (
	// argoModule is the argo-rollouts release whose CRD the suite installs.
	argoModule = framework.ArgoModule
	// rolloutController is the Rollouts' key in ReconcileCounts (their kind
	// in lower case; configstamp_reconciles_total counts them as "Rollout").
	rolloutController = "rollout"
)

// The suite's flags: one rollout slot and no debounce, so a wave is strictly
// sequential and in the order of its priorities, and nothing waits on a timer.
// The webhook configuration and TLS Secret are the installation's names:
// configstamp runs under its ServiceAccount, which may update only those.
var suiteArgs = []string{"--max-concurrent-rollouts=1", "--debounce=0",
	"--webhook-config-name=configstamp-mutating-webhook-configuration", "--tls-secret=configstamp-webhook-tls"}

// serviceAccount is configstamp's identity in config/selfsigned.
const serviceAccount = "configstamp-controller-manager"

func TestMain(m *testing.M) {
	kinds, err := framework.ArgoKindsFile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kinds:", err)
		os.Exit(1)
	}
	os.Exit(framework.Main(m, &env, framework.Config{
		Plane: framework.Kwok, HashKey: hashKey,
		Args: append([]string{"--kinds-config=" + kinds}, suiteArgs...),
		// configstamp runs with the RBAC a user installs: config/selfsigned
		// with the Argo Rollouts component, whose rules are generated.
		// configstamp reads the kinds whose CRD is installed when it starts.
		Prepare: func(ctx context.Context, e *framework.Env) (string, error) {
			kubeconfig, err := installRBAC(ctx, e)
			if err != nil {
				return "", err
			}
			return kubeconfig, installRolloutCRD(ctx, e)
		},
		ExtraKinds: []string{"Rollout"},
	}))
}

// installRBAC installs the identity and RBAC of config/selfsigned with the
// Argo Rollouts component added as its kustomization says (in a copy of
// config/), and the webhook configuration it may update, and returns a
// kubeconfig with only that ServiceAccount's token.
func installRBAC(ctx context.Context, e *framework.Env) (string, error) {
	return e.InstallWithComponents(ctx, "config/selfsigned", serviceAccount, "../kinds/argo-rollouts")
}

// installRolloutCRD applies the Rollout CRD of argoModule as a user would:
// from the module (downloaded through the Go module proxy into the module
// cache, not a dependency of configstamp), with a server-side apply (the file
// is too large for kubectl's last-applied annotation), and waits until it is
// Established.
func installRolloutCRD(ctx context.Context, e *framework.Env) error {
	began := time.Now()
	dir, err := framework.ArgoSource(ctx)
	if err != nil {
		return err
	}
	if err := e.ApplyCRDs(ctx, "rollouts.argoproj.io", "-f", filepath.Join(dir, "manifests", "crds", "rollout-crd.yaml")); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "kinds: Rollout CRD of %s established in %v\n", argoModule, time.Since(began).Round(time.Millisecond))
	return nil
}

// rolloutManifest is a Rollout as a user writes it: one replica, a canary
// strategy, a pod template that mounts the ConfigMap cm, a rollout priority,
// and the opt-in label unless its namespace opts in (optIn false).
func rolloutManifest(ns, name, cm string, priority int, optIn bool) string {
	labels := "{}"
	if optIn {
		labels = `{"configstamp.io/enabled": "true"}`
	}
	return fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: %[2]s
  namespace: %[1]s
  labels: %[5]s
  annotations:
    configstamp.io/rollout-priority: "%[4]d"
spec:
  replicas: 1
  selector:
    matchLabels:
      app: %[2]s
  strategy:
    canary: {}
  template:
    metadata:
      labels:
        app: %[2]s
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: app
        image: registry.example/app:1
        volumeMounts:
        - name: %[3]s
          mountPath: /config/%[3]s
      volumes:
      - name: %[3]s
        configMap:
          name: %[3]s
`, ns, name, cm, priority, labels)
}

// applyRollout creates (or updates) an opted-in Rollout with kubectl apply.
func applyRollout(t *testing.T, ns, name, cm string, priority int) {
	t.Helper()
	env.Kubectl(t, rolloutManifest(ns, name, cm, priority, true), "apply", "-f", "-")
}

// deployment is an opted-in Deployment whose pod spec is the Rollouts' (it
// mounts the ConfigMap cm) with a rollout priority.
func deployment(ns, name, cm string, priority int) *appsv1.Deployment {
	d := framework.Deployment(ns, name, framework.OptIn, podSpec(cm))
	d.Annotations = map[string]string{rollout.AnnotationPriority: strconv.Itoa(priority)}
	return d
}

// podSpec is the pod spec of rolloutManifest.
func podSpec(cm string) corev1.PodSpec {
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, cm)
	return spec
}

// expectedHash is the stamp of a workload in ns mounting the ConfigMap cm
// that holds data: what the webhook gives a Deployment with that template.
func expectedHash(ns, cm string, data map[string]string) string {
	spec := podSpec(cm)
	refs, _ := stamp.WorkloadRefs(nil, &spec)
	src := stamp.SourceFromConfigMap(framework.ConfigMap(ns, cm, data, nil))
	return stamp.NewHasher(hashKey).Compute(ns, refs, map[stamp.ObjectRef]stamp.Source{src.Ref: src}).Hash
}

// rolloutObj is a Rollout to read by namespace and name.
func rolloutObj(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("argoproj.io/v1alpha1")
	u.SetKind("Rollout")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// get reads obj live and returns it.
func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	env.Get(t, obj)
	return obj
}

// record is obj's rollout record as configstamp keeps it, read live.
func record(t *testing.T, obj client.Object) rollout.Record {
	t.Helper()
	return rollout.Read(get(t, obj).GetAnnotations())
}

// waitState polls until obj's rollout record is in state want.
func waitState(t *testing.T, obj client.Object, want rollout.State) {
	t.Helper()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		r := record(t, obj)
		return r.State == want, fmt.Sprintf("%s: rollout-state %q, want %q", obj.GetName(), r.State, want)
	})
}

// setRolloutStatus writes what Argo's controller writes once it has seen the
// Rollout's current template: status.observedGeneration (metadata.generation,
// as a string) and status.phase. It returns that generation.
func setRolloutStatus(t *testing.T, ns, name, phase string) int64 {
	t.Helper()
	gen := get(t, rolloutObj(ns, name)).GetGeneration()
	patch := fmt.Sprintf(`{"status":{"observedGeneration":%q,"phase":%q}}`, strconv.FormatInt(gen, 10), phase)
	env.Kubectl(t, "", "-n", ns, "patch", "rollout", name, "--subresource=status", "--type=merge", "-p", patch)
	return gen
}

// metric reads one of configstamp's metrics.
func metric(t *testing.T, family string, labels ...string) float64 {
	t.Helper()
	v, err := env.Configstamp.Metrics(family, labels...)
	if err != nil {
		t.Fatalf("scraping %s: %v", family, err)
	}
	return v
}

// warnings counts the Warning events with reason about obj (by name and UID)
// and fails the test if an event of that reason has another type.
func warnings(t *testing.T, obj client.Object, reason string) int {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := env.Client.List(t.Context(), list, client.InNamespace(obj.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range list.Items {
		if ev.Regarding.Name != obj.GetName() || ev.Reason != reason || (obj.GetUID() != "" && ev.Regarding.UID != obj.GetUID()) {
			continue
		}
		if ev.Type != corev1.EventTypeWarning {
			t.Errorf("%s event on %s is of type %s, want Warning: %s", reason, obj.GetName(), ev.Type, ev.Note)
			continue
		}
		n++
	}
	if n != env.CountEvents(t, obj, reason) {
		t.Errorf("%s events on %s: %d Warnings of %d", reason, obj.GetName(), n, env.CountEvents(t, obj, reason))
	}
	return n
}

// reconciles are the reconcile counts of the Deployments and of the
// Rollouts, for Process.WaitIdle.
func reconciles(t *testing.T) map[string]float64 {
	t.Helper()
	all := env.Configstamp.ReconcileCounts(t)
	return map[string]float64{"deployment": all["deployment"], rolloutController: all[rolloutController]}
}
