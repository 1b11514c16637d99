package framework

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// OptIn is the opt-in label.
var OptIn = map[string]string{stamp.LabelEnabled: "true"}

// ConfigMap builds a ConfigMap.
func ConfigMap(ns, name string, data map[string]string, annotations map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Data:       data,
	}
}

// Secret builds a Secret from string data.
func Secret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string][]byte{},
	}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// PodSpec is a one-container pod spec; mutate it to add references.
func PodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		Containers:                    []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		TerminationGracePeriodSeconds: ptr.To[int64](0),
	}
}

// MountConfigMap adds a volume of ConfigMap name (all keys) mounted at /config/name.
func MountConfigMap(spec *corev1.PodSpec, name string) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}})
	spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: name, MountPath: "/config/" + name})
}

// RotatingApp is an opted-in Deployment of ns, app, of replicas, whose
// container reads the Secrets db-user and db-password (envFrom), named as
// sources that change together (configstamp.io/rotate-together).
func RotatingApp(ns string, replicas int32) *appsv1.Deployment {
	spec := PodSpec()
	for _, name := range []string{"db-user", "db-password"} {
		spec.Containers[0].EnvFrom = append(spec.Containers[0].EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}}})
	}
	d := Deployment(ns, "app", OptIn, spec)
	d.Spec.Replicas = &replicas
	d.Annotations = map[string]string{rollout.AnnotationRotateTogether: "Secret/db-user,Secret/db-password"}
	return d
}

// Deployment builds a Deployment with the given workload labels and pod spec;
// its pods are labelled app=name.
func Deployment(ns, name string, labels map[string]string, spec corev1.PodSpec) *appsv1.Deployment {
	pod := map[string]string{"app": name}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: pod},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod}, Spec: spec},
		},
	}
}

// StatefulSet builds a one-replica StatefulSet.
func StatefulSet(ns, name string, labels map[string]string, spec corev1.PodSpec) *appsv1.StatefulSet {
	pod := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: pod},
			Template:    corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod}, Spec: spec},
		},
	}
}

// DaemonSet builds a DaemonSet.
func DaemonSet(ns, name string, labels map[string]string, spec corev1.PodSpec) *appsv1.DaemonSet {
	pod := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: pod},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod}, Spec: spec},
		},
	}
}

// Manifest renders objects as a v1 List in JSON, which kubectl reads like YAML.
func Manifest(t testing.TB, objs ...client.Object) string {
	t.Helper()
	items := make([]json.RawMessage, len(objs))
	for i, o := range objs {
		raw, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		items[i] = raw
	}
	raw, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// Apply runs `kubectl apply -f -` with objs and returns kubectl's stderr
// (where admission warnings appear).
func (e *Env) Apply(t testing.TB, objs ...client.Object) string {
	t.Helper()
	_, stderr := e.Kubectl(t, Manifest(t, objs...), "apply", "-f", "-")
	return stderr
}

// App creates, in ns, the ConfigMap app-config (a=1) and the opted-in
// Deployment app mounting it, and returns the Deployment as admitted (its
// stamp, if the webhook gave one, is the CREATE response's).
func (e *Env) App(t testing.TB, ns string) *appsv1.Deployment {
	t.Helper()
	cm, dep := appObjects(ns)
	for _, obj := range []client.Object{cm, dep} {
		if err := e.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	return dep
}

// appObjects are App's ConfigMap and Deployment in ns.
func appObjects(ns string) (*corev1.ConfigMap, *appsv1.Deployment) {
	spec := PodSpec()
	MountConfigMap(&spec, "app-config")
	return ConfigMap(ns, "app-config", map[string]string{"a": "1"}, nil), Deployment(ns, "app", OptIn, spec)
}

// Get reads obj (by its namespace and name) live.
func (e *Env) Get(t testing.TB, obj client.Object) {
	t.Helper()
	if err := e.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("reading %T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
}

// TemplateHash returns the stamp on a workload's pod template.
func TemplateHash(obj client.Object) string {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return w.Spec.Template.Annotations[stamp.AnnotationHash]
	case *appsv1.StatefulSet:
		return w.Spec.Template.Annotations[stamp.AnnotationHash]
	case *appsv1.DaemonSet:
		return w.Spec.Template.Annotations[stamp.AnnotationHash]
	case *unstructured.Unstructured:
		// A custom kind (--kinds-config) whose pod template is spec.template.
		h, _, _ := unstructured.NestedString(w.Object, "spec", "template", "metadata", "annotations", stamp.AnnotationHash)
		return h
	}
	return ""
}

// WaitTemplateHash polls obj until its template stamp differs from not (use ""
// to wait for a first stamp) and returns it.
func (e *Env) WaitTemplateHash(t testing.TB, obj client.Object, not string) string {
	t.Helper()
	var h string
	Eventually(t, 30*time.Second, func() (bool, string) {
		e.Get(t, obj)
		h = TemplateHash(obj)
		return h != "" && h != not, fmt.Sprintf("template stamp is %q", h)
	})
	return h
}

// WaitEvent polls until an event with reason about obj exists whose note
// contains every given fragment, and returns its note. When obj has a UID the
// event must carry it, as `kubectl describe` requires.
func (e *Env) WaitEvent(t testing.TB, obj client.Object, reason string, fragments ...string) string {
	t.Helper()
	var note string
	Eventually(t, 90*time.Second, func() (bool, string) {
		list := &eventsv1.EventList{}
		if err := e.Client.List(t.Context(), list, client.InNamespace(obj.GetNamespace())); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range list.Items {
			if ev.Regarding.Name != obj.GetName() || ev.Reason != reason {
				continue
			}
			if uid := obj.GetUID(); uid != "" && ev.Regarding.UID != uid {
				// kubectl describe selects events by involvedObject.uid.
				seen = append(seen, "(regarding uid "+string(ev.Regarding.UID)+", not "+string(uid)+") "+ev.Note)
				continue
			}
			seen = append(seen, ev.Note)
			ok := true
			for _, f := range fragments {
				ok = ok && strings.Contains(ev.Note, f)
			}
			if ok {
				note = ev.Note
				return true, ""
			}
		}
		return false, fmt.Sprintf("events %s on %s: %q", reason, obj.GetName(), seen)
	})
	return note
}

// TemplateJSON returns a workload's pod template as JSON, to compare before and
// after: a Deployment's generation also moves on metadata annotation changes, so
// only the template says whether pods would roll.
func TemplateJSON(t testing.TB, obj client.Object) string {
	t.Helper()
	var tmpl any
	switch w := obj.(type) {
	case *appsv1.Deployment:
		tmpl = w.Spec.Template
	case *appsv1.StatefulSet:
		tmpl = w.Spec.Template
	case *appsv1.DaemonSet:
		tmpl = w.Spec.Template
	}
	raw, err := json.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// LivePods lists the pods in ns with labels that are not being deleted.
func (e *Env) LivePods(t testing.TB, ns string, labels map[string]string) []corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	if err := e.Client.List(t.Context(), list, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// PodsStamped are the live pods of workload app (label app) in ns whose
// template was stamped hash.
func (e *Env) PodsStamped(t testing.TB, ns, app, hash string) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, p := range e.LivePods(t, ns, map[string]string{"app": app}) {
		if p.Annotations[stamp.AnnotationHash] == hash {
			out = append(out, p)
		}
	}
	return out
}

// ReplicaSets returns the ReplicaSets of the Deployment whose pods are labelled app=name.
func (e *Env) ReplicaSets(t testing.TB, ns, name string) []appsv1.ReplicaSet {
	t.Helper()
	list := &appsv1.ReplicaSetList{}
	if err := e.Client.List(t.Context(), list, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// RolledOut reports whether a Deployment's rollout is complete: its generation
// observed, every replica updated and available, no old pods left.
func RolledOut(d *appsv1.Deployment) bool {
	s, want := d.Status, *d.Spec.Replicas
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want
}

// CountEvents returns how many events with reason are about obj (by name and,
// when obj has one, UID). An event repeated within the recorder's series
// window is one Event object with a series: each occurrence counts.
func (e *Env) CountEvents(t testing.TB, obj client.Object, reason string) int {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := e.Client.List(t.Context(), list, client.InNamespace(obj.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range list.Items {
		if ev.Regarding.Name == obj.GetName() && ev.Reason == reason && (obj.GetUID() == "" || ev.Regarding.UID == obj.GetUID()) {
			n += max(1, seriesCount(ev))
		}
	}
	return n
}

// Revisions counts the ControllerRevisions owned by the StatefulSet or
// DaemonSet named owner: one per distinct template it ever had.
func (e *Env) Revisions(t testing.TB, ns, owner string) int {
	t.Helper()
	list := &appsv1.ControllerRevisionList{}
	if err := e.Client.List(t.Context(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cr := range list.Items {
		for _, o := range cr.OwnerReferences {
			if o.Name == owner {
				n++
			}
		}
	}
	return n
}

// WatchDeployments calls seen with every Deployment of ns the API server
// reports added or modified, from now until the test ends.
func (e *Env) WatchDeployments(t testing.TB, ns string, seen func(*appsv1.Deployment)) {
	t.Helper()
	wc, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(t.Context(), &appsv1.DeploymentList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				seen(d)
			}
		}
	}()
}

// WaitStatefulSetRolledOut polls until the StatefulSet's rollout is complete:
// observed, every replica updated and ready on the update revision.
func (e *Env) WaitStatefulSetRolledOut(t testing.TB, s *appsv1.StatefulSet) {
	t.Helper()
	Eventually(t, 90*time.Second, func() (bool, string) {
		e.Get(t, s)
		st := s.Status
		ok := st.ObservedGeneration >= s.Generation && st.UpdateRevision == st.CurrentRevision &&
			st.ReadyReplicas == *s.Spec.Replicas && st.UpdatedReplicas == *s.Spec.Replicas
		return ok, fmt.Sprintf("statefulset %s: %+v", s.Name, st)
	})
}

// MountingApp is App applied with kubectl, as a user would, in a new
// namespace named from prefix.
func (e *Env) MountingApp(t testing.TB, prefix string) (string, *appsv1.Deployment) {
	t.Helper()
	ns := e.Namespace(t, prefix, nil)
	cm, dep := appObjects(ns)
	e.Apply(t, cm, dep)
	return ns, dep
}

// seriesCount is how many times ev occurred by its series (0: no series).
func seriesCount(ev eventsv1.Event) int {
	if ev.Series == nil {
		return 0
	}
	return int(ev.Series.Count)
}
