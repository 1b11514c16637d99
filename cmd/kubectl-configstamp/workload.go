package main

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	cswl "github.com/configstamp/configstamp/controllers/workload"
)

// workload is what the plugin needs of a Deployment, StatefulSet, DaemonSet
// or an object of an extra kind.
type workload struct {
	kind     string
	meta     metav1.ObjectMeta
	template *corev1.PodTemplateSpec
	// status is its spec and status as a rollout reads them: whether it
	// can make a canary pod now, and what its canary costs.
	status cswl.Status
}

// fromUnstructured reads an object of kind k, as the dynamic client returns
// every kind: a built-in kind as its typed object, so that its Behavior reads
// it as the manager does. False when it has no pod template where k says (an
// object of another kind, an Argo Rollout with workloadRef).
func fromUnstructured(k cswl.Kind, u *unstructured.Unstructured) (workload, bool) {
	obj := client.Object(u)
	if !k.Unstructured() {
		obj = k.New()
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj) != nil {
			return workload{}, false
		}
	}
	tmpl := k.PodTemplate(obj)
	md, _ := u.Object["metadata"].(map[string]any)
	var meta metav1.ObjectMeta
	if tmpl == nil || runtime.DefaultUnstructuredConverter.FromUnstructured(md, &meta) != nil {
		return workload{}, false
	}
	return workload{kind: k.Name, meta: meta, template: tmpl, status: k.Status(obj)}, true
}

// ref is "deployment/name", as kubectl names it.
func (w workload) ref() string { return strings.ToLower(w.kind) + "/" + w.meta.Name }

// references are the workload's template and extra-* references (not selectors).
func (w workload) references() []stamp.Reference {
	refs, _ := stamp.WorkloadReferences(w.meta.Annotations, pin.SourceSpec(w.template))
	return refs
}

// selectedBy reports whether the rollout selector of an object with these
// annotations matches the workload's pod-template labels.
func (w workload) selectedBy(annotations map[string]string) (string, bool) {
	sel, ok, _ := stamp.RolloutSelector(annotations)
	if !ok || sel.Empty() || !sel.Matches(labels.Set(w.template.Labels)) {
		return "", false
	}
	return sel.String(), true
}

// optedIn is stamp.Enabled for the workload in its namespace.
func (w workload) optedIn(nsLabels map[string]string) bool {
	ok, _ := stamp.Enabled(w.meta.Labels, nsLabels)
	return ok
}

func sortWorkloads(ws []workload) {
	slices.SortFunc(ws, func(a, b workload) int {
		return cmp.Or(cmp.Compare(a.meta.Namespace, b.meta.Namespace), cmp.Compare(a.kind, b.kind), cmp.Compare(a.meta.Name, b.meta.Name))
	})
}

// parseSourceArg reads configmap/NAME or secret/NAME (kubectl's spellings).
func parseSourceArg(arg string) (stamp.ObjectRef, error) {
	kind, name, ok := strings.Cut(arg, "/")
	if ok && name != "" {
		switch strings.ToLower(kind) {
		case "configmap", "configmaps", "cm":
			return stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: name}, nil
		case "secret", "secrets":
			return stamp.ObjectRef{Kind: stamp.KindSecret, Name: name}, nil
		}
	}
	return stamp.ObjectRef{}, usagef("%q is not configmap/NAME or secret/NAME", arg)
}

// keysText renders referenced keys for a table: "*" for every key.
func keysText(keys []string) string {
	if keys == nil {
		return "*"
	}
	return strings.Join(keys, ",")
}

// mergeKeys unions key lists where nil means every key.
func mergeKeys(a []string, aSet bool, b []string) ([]string, bool) {
	if !aSet {
		return slices.Clone(b), true
	}
	if a == nil || b == nil {
		return nil, true
	}
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out), true
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
