package workload

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// KindsConfig is the file --kinds-config names: the kinds, beyond
// Deployments, StatefulSets and DaemonSets, whose pod template configstamp
// stamps (Argo Rollouts, other CRDs).
type KindsConfig struct {
	Kinds []KindConfig `json:"kinds"`
}

// KindConfig is one extra kind: which objects, where their pod template
// sits, and where their status tells a rollout's progress.
type KindConfig struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Kind     string `json:"kind"`
	Resource string `json:"resource"`
	// TemplatePath is the dotted path of the pod template, e.g. spec.template.
	TemplatePath string `json:"templatePath"`
	// Progress: nil when the kind has no status configstamp can follow; a
	// rollout of it then holds no slot and is recorded complete at once.
	Progress *Progress `json:"progress,omitempty"`
}

// Progress names, as dotted paths, the fields that tell whether an object's
// rollout is complete. Every field given must agree:
//   - ObservedGeneration: the generation the object's controller has seen (an
//     integer, or an integer in a string as Argo Rollouts writes it); the
//     rollout is pending until it reaches metadata.generation;
//   - Phase: complete when its value is one of CompletePhases, failed when
//     one of FailedPhases, else pending;
//   - UpdatedReplicas (with Replicas, the desired count, 1 when absent, and
//     AvailableReplicas): complete once every desired replica is updated and
//     every updated one available.
type Progress struct {
	ObservedGeneration string   `json:"observedGeneration,omitempty"`
	Phase              string   `json:"phase,omitempty"`
	CompletePhases     []string `json:"completePhases,omitempty"`
	FailedPhases       []string `json:"failedPhases,omitempty"`
	Replicas           string   `json:"replicas,omitempty"`
	UpdatedReplicas    string   `json:"updatedReplicas,omitempty"`
	AvailableReplicas  string   `json:"availableReplicas,omitempty"`
}

// fields returns the dotted paths p names (some may be empty).
func (p *Progress) fields() []string {
	return []string{p.ObservedGeneration, p.Phase, p.Replicas, p.UpdatedReplicas, p.AvailableReplicas}
}

// Paths returns every field path p reads.
func (p *Progress) Paths() [][]string {
	var out [][]string
	for _, s := range p.fields() {
		if s != "" {
			out = append(out, strings.Split(s, "."))
		}
	}
	return out
}

// GVK is the kind's group, version and kind.
func (c KindConfig) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: c.Group, Version: c.Version, Kind: c.Kind}
}

// LoadKindsConfig reads and checks a --kinds-config file. An empty path: no
// extra kinds.
func LoadKindsConfig(path string) ([]KindConfig, error) {
	if path == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("while reading --kinds-config: %w", err)
	}
	return ParseKindsConfig(raw)
}

// ParseKindsConfig parses and checks the contents of a --kinds-config file:
// unknown fields, missing names, a kind configstamp already knows or listed
// twice, a path that is not a dotted field path, phases without a phase
// field are all refused, so a typo fails at start rather than never rolling.
func ParseKindsConfig(raw []byte) ([]KindConfig, error) {
	var cfg KindsConfig
	if err := yaml.UnmarshalStrict(bytes.TrimSpace(raw), &cfg); err != nil {
		return nil, fmt.Errorf("while parsing --kinds-config: %w", err)
	}
	seen := map[string]bool{}
	for _, k := range builtins {
		seen[k.Name] = true
	}
	for i, c := range cfg.Kinds {
		where := fmt.Sprintf("--kinds-config kinds[%d] (%s)", i, c.Kind)
		for field, v := range map[string]string{"version": c.Version, "kind": c.Kind, "resource": c.Resource, "templatePath": c.TemplatePath} {
			if v == "" {
				return nil, fmt.Errorf("%s: %s is required", where, field)
			}
		}
		if c.Group == "" {
			return nil, fmt.Errorf("%s: group is required (the core group has no pod-template kinds configstamp lacks)", where)
		}
		if errs := validation.IsDNS1123Subdomain(c.Group); len(errs) > 0 {
			return nil, fmt.Errorf("%s: group %q: %s", where, c.Group, strings.Join(errs, "; "))
		}
		if errs := validation.IsDNS1035Label(c.Resource); len(errs) > 0 {
			return nil, fmt.Errorf("%s: resource %q: %s", where, c.Resource, strings.Join(errs, "; "))
		}
		if seen[c.Kind] {
			return nil, fmt.Errorf("%s: kind %s is already handled (kind names must be unique, built-in ones included)", where, c.Kind)
		}
		seen[c.Kind] = true
		paths := []string{c.TemplatePath}
		if p := c.Progress; p != nil {
			paths = append(paths, p.fields()...)
			if p.Phase == "" && len(p.CompletePhases)+len(p.FailedPhases) > 0 {
				return nil, fmt.Errorf("%s: completePhases and failedPhases need progress.phase", where)
			}
			if p.Phase != "" && len(p.CompletePhases) == 0 {
				return nil, fmt.Errorf("%s: progress.phase needs completePhases", where)
			}
			if (p.Replicas != "" || p.AvailableReplicas != "") && p.UpdatedReplicas == "" {
				return nil, fmt.Errorf("%s: progress.replicas and availableReplicas need updatedReplicas", where)
			}
		}
		for _, path := range paths {
			if path != "" && !validPath(path) {
				return nil, fmt.Errorf("%s: %q is not a dotted field path such as spec.template", where, path)
			}
		}
	}
	return cfg.Kinds, nil
}

// fieldName is one segment of a dotted field path.
var fieldName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

func validPath(path string) bool {
	for _, seg := range strings.Split(path, ".") {
		if !fieldName.MatchString(seg) {
			return false
		}
	}
	return true
}

// Custom returns the Kind of c: objects read as unstructured, their pod
// template at c.TemplatePath, their progress as c.Progress says.
func Custom(c KindConfig) Kind {
	gvk := c.GVK()
	listGVK := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	path := strings.Split(c.TemplatePath, ".")
	return Kind{
		Name: c.Kind, Resource: c.Resource, GVK: gvk,
		TemplatePath: path,
		Progress:     c.Progress,
		New: func() client.Object {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			return u
		},
		NewList: func() client.ObjectList {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(listGVK)
			return l
		},
		Items: func(l client.ObjectList) []client.Object {
			items := l.(*unstructured.UnstructuredList).Items
			out := make([]client.Object, len(items))
			for i := range items {
				out[i] = &items[i]
			}
			return out
		},
		behavior: typed[*unstructured.Unstructured]{custom{gk: gvk.GroupKind(), path: path, progress: c.Progress}},
	}
}

// custom is the Behavior of an extra kind (--kinds-config): its objects are
// unstructured, its template at path, its progress (nil: not followed) the
// fields progress names.
type custom struct {
	gk       schema.GroupKind
	path     []string
	progress *Progress
}

// of reports whether u is an object of c's kind.
func (c custom) of(u *unstructured.Unstructured) bool {
	return u.GroupVersionKind().GroupKind() == c.gk
}

// Template converts the pod template of obj to a PodTemplateSpec: a copy,
// which SetTemplateAnnotation writes to. nil when its template is missing or
// malformed.
func (c custom) Template(u *unstructured.Unstructured) *corev1.PodTemplateSpec {
	if !c.of(u) {
		return nil
	}
	m, found, err := unstructured.NestedFieldNoCopy(u.Object, c.path...)
	tm, isMap := m.(map[string]any)
	if err != nil || !found || !isMap {
		return nil
	}
	tmpl := &corev1.PodTemplateSpec{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tm, tmpl); err != nil {
		return nil
	}
	return tmpl
}

// Status: as the kind's Progress says; without one, complete at once with
// nothing to wait for. Its whole status is its Mark. It counts no ready or
// available pods, and waits no minReadySeconds.
func (c custom) Status(u *unstructured.Unstructured) Status {
	st, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status")
	out := Status{Complete: true, NothingToWaitFor: c.progress == nil, Mark: fmt.Sprint(st)} // fmt prints maps sorted by key
	if c.progress == nil {
		return out
	}
	out.Complete, out.Exceeded = customComplete(u, c.progress)
	if out.Exceeded {
		phase, _, _ := unstructured.NestedString(u.Object, strings.Split(c.progress.Phase, ".")...)
		out.FailedReason = fmt.Sprintf("its %s reports the failed phase %q", c.progress.Phase, phase)
	}
	return out
}

// customComplete judges an extra kind's rollout from the fields its Progress
// names (see Progress); a field that is missing or of another type reads as
// "not there yet".
func customComplete(u *unstructured.Unstructured, p *Progress) (complete, exceeded bool) {
	if p.ObservedGeneration != "" {
		observed, ok := intField(u, p.ObservedGeneration)
		if !ok || observed < u.GetGeneration() {
			return false, false
		}
	}
	if p.Phase != "" {
		phase, _, _ := unstructured.NestedString(u.Object, strings.Split(p.Phase, ".")...)
		if slices.Contains(p.FailedPhases, phase) {
			return false, true
		}
		if !slices.Contains(p.CompletePhases, phase) {
			return false, false
		}
	}
	if p.UpdatedReplicas != "" {
		want := int64(1)
		if p.Replicas != "" {
			if n, ok := intField(u, p.Replicas); ok {
				want = n
			}
		}
		updated, _ := intField(u, p.UpdatedReplicas)
		available := updated
		if p.AvailableReplicas != "" {
			available, _ = intField(u, p.AvailableReplicas)
		}
		if updated < want || available < updated {
			return false, false
		}
	}
	return true, false
}

// intField reads an integer, or an integer written as a string, at path.
func intField(u *unstructured.Unstructured, path string) (int64, bool) {
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, strings.Split(path, ".")...)
	if err != nil || !found {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return n, true
	case float64:
		return int64(n), true
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

// Slim keeps of obj what configstamp reads (its metadata as it is, the pod
// template tmpl, the fields its Progress names) and drops the rest.
func (c custom) Slim(u *unstructured.Unstructured, tmpl *corev1.PodTemplateSpec) {
	if !c.of(u) {
		return
	}
	out := map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": u.Object["metadata"]}
	if tmpl != nil {
		if m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tmpl); err == nil {
			_ = unstructured.SetNestedField(out, m, c.path...)
		}
	}
	if c.progress != nil {
		for _, path := range c.progress.Paths() {
			if v, found, err := unstructured.NestedFieldNoCopy(u.Object, path...); err == nil && found {
				_ = unstructured.SetNestedField(out, runtime.DeepCopyJSONValue(v), path...)
			}
		}
	}
	u.Object = out
}

// Revisions: configstamp reads no revisions of an extra kind (it undoes
// none).
func (custom) Revisions() client.ObjectList { return nil }

func (custom) RevisionNumber(client.Object) int64 { return 0 }

// Hold: an extra kind is not held (an Argo Rollout has its own steps): its
// whole rollout is its change's canary.
func (custom) Hold(*unstructured.Unstructured, time.Duration) Hold { return nil }

// Freeze: an extra kind is not held, so nothing to freeze.
func (custom) Freeze(*unstructured.Unstructured) Hold { return nil }

// Nodes: none; an extra kind's pods are judged as a whole.
func (custom) Nodes(*unstructured.Unstructured) NodeRollout { return nil }

// SetTemplateAnnotation sets an annotation of obj's pod template, in place.
// For an extra kind it reports false when the template is not an object
// (PodTemplate then returns nil too); a null metadata or annotations map is
// made.
func (k Kind) SetTemplateAnnotation(obj client.Object, key, value string) bool {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if !k.of(u) {
			return false
		}
		v, _, _ := unstructured.NestedFieldNoCopy(u.Object, k.TemplatePath...)
		tmpl, ok := v.(map[string]any)
		if !ok {
			return false
		}
		md, ok := tmpl["metadata"].(map[string]any)
		if !ok {
			md = map[string]any{}
			tmpl["metadata"] = md
		}
		ann, ok := md["annotations"].(map[string]any)
		if !ok {
			ann = map[string]any{}
			md["annotations"] = ann
		}
		ann[key] = value
		return true
	}
	tmpl := k.PodTemplate(obj)
	if tmpl == nil {
		return false
	}
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	tmpl.Annotations[key] = value
	return true
}

// SetTemplateReferences writes back into obj what pinned config changes of its
// pod template tmpl (PodTemplate's result): for an extra kind, whose tmpl is a
// typed copy, the ConfigMap and Secret names at the same places, the stamp and
// pin.AnnotationPinned annotations and the pin.LabelPinned label (each set, or
// removed when tmpl has none), and nothing else: no typed round trip, which
// would add fields the CRD's schema does not know. A built-in kind's tmpl is
// its own: nothing to do.
func (k Kind) SetTemplateReferences(obj client.Object, tmpl *corev1.PodTemplateSpec) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || tmpl == nil || !k.of(u) {
		return
	}
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, k.TemplatePath...)
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	setOrRemove(m, []string{"metadata", "annotations", stamp.AnnotationHash}, tmpl.Annotations[stamp.AnnotationHash])
	setOrRemove(m, []string{"metadata", "annotations", pin.AnnotationPinned}, tmpl.Annotations[pin.AnnotationPinned])
	setOrRemove(m, []string{"metadata", "labels", pin.LabelPinned}, tmpl.Labels[pin.LabelPinned])
	spec, _ := m["spec"].(map[string]any)
	volumes := items(spec, "volumes")
	for i, vol := range tmpl.Spec.Volumes {
		if i >= len(volumes) {
			break
		}
		if vol.ConfigMap != nil {
			setName(volumes[i], vol.ConfigMap.Name, "configMap", "name")
		}
		if vol.Secret != nil {
			setName(volumes[i], vol.Secret.SecretName, "secret", "secretName")
		}
		if vol.Projected != nil {
			sources := items(volumes[i], "projected", "sources")
			for j, src := range vol.Projected.Sources {
				if j < len(sources) && src.ConfigMap != nil {
					setName(sources[j], src.ConfigMap.Name, "configMap", "name")
				}
				if j < len(sources) && src.Secret != nil {
					setName(sources[j], src.Secret.Name, "secret", "name")
				}
			}
		}
	}
	for field, containers := range map[string][]corev1.Container{"initContainers": tmpl.Spec.InitContainers, "containers": tmpl.Spec.Containers} {
		us := items(spec, field)
		for i, c := range containers {
			if i < len(us) {
				setContainerReferences(us[i], &c)
			}
		}
	}
}

func setContainerReferences(u map[string]any, c *corev1.Container) {
	envFrom, env := items(u, "envFrom"), items(u, "env")
	for j, e := range c.EnvFrom {
		if j < len(envFrom) && e.ConfigMapRef != nil {
			setName(envFrom[j], e.ConfigMapRef.Name, "configMapRef", "name")
		}
		if j < len(envFrom) && e.SecretRef != nil {
			setName(envFrom[j], e.SecretRef.Name, "secretRef", "name")
		}
	}
	for j, e := range c.Env {
		if j >= len(env) || e.ValueFrom == nil {
			continue
		}
		if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
			setName(env[j], r.Name, "valueFrom", "configMapKeyRef", "name")
		}
		if r := e.ValueFrom.SecretKeyRef; r != nil {
			setName(env[j], r.Name, "valueFrom", "secretKeyRef", "name")
		}
	}
}

// items returns the objects of the list at path in m (nil when absent).
func items(m map[string]any, path ...string) []map[string]any {
	v, _, _ := unstructured.NestedFieldNoCopy(m, path...)
	list, _ := v.([]any)
	out := make([]map[string]any, len(list))
	for i, x := range list {
		out[i], _ = x.(map[string]any)
	}
	return out
}

// setName sets the name at path in m when the object at path exists.
func setName(m map[string]any, name string, path ...string) {
	if m == nil || name == "" {
		return
	}
	if parent, found, _ := unstructured.NestedFieldNoCopy(m, path[:len(path)-1]...); found {
		if pm, ok := parent.(map[string]any); ok {
			pm[path[len(path)-1]] = name
		}
	}
}

// setOrRemove sets the string at path in m, or removes it when value is "".
func setOrRemove(m map[string]any, path []string, value string) {
	if value == "" {
		unstructured.RemoveNestedField(m, path...)
		return
	}
	_ = unstructured.SetNestedField(m, value, path...)
}
