package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// WarningsPath is where the optional apply-time warning webhook serves
// ConfigMap and Secret UPDATEs (--apply-warnings).
const WarningsPath = "/warn-sources"

// MaxWarnedWorkloads is how many workloads a warning names; the rest are counted.
const MaxWarnedWorkloads = 10

// DataChanged is the webhook's matchCondition: only an UPDATE that changes
// data or binaryData reaches configstamp. A field that is absent is compared
// as empty (has()): selecting an absent field is an error in CEL, and an
// erroring condition with failurePolicy Ignore skips the webhook.
const DataChanged = `(has(object.data) ? object.data : {}) != (has(oldObject.data) ? oldObject.data : {}) || ` +
	`(has(object.binaryData) ? object.binaryData : {}) != (has(oldObject.binaryData) ? oldObject.binaryData : {})`

// SetupWarnings registers the apply-time warning webhook. It reads the
// manager's cache, which must carry the workload.IndexSources and
// workload.IndexHasSelector indexes (controllers.SetupIndexes).
func SetupWarnings(mgr ctrl.Manager, scope *workload.Scope, kinds *workload.Registry) {
	mgr.GetWebhookServer().Register(WarningsPath, &admission.Webhook{Handler: &ChangeWarner{Cache: mgr.GetCache(), Scope: scope, Kinds: kinds}})
}

// ChangeWarner answers a ConfigMap or Secret UPDATE with an admission warning
// naming the workloads the change rolls. It never denies. It reads only the
// cache (the workloads through workload.IndexSources, Namespaces), never the
// API server, and it compares the old and new object key by key with the
// same rule as `kubectl configstamp plan` (workload.ChangeRolls): a change to
// keys no workload references rolls nothing. No value, digest or key name of
// the data is in the warning: only the workloads' kinds and names.
type ChangeWarner struct {
	Cache client.Reader
	Scope *workload.Scope
	// Kinds are the workload kinds a change may roll. Nil: the built-in kinds.
	Kinds *workload.Registry
}

func (w *ChangeWarner) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp := admission.Allowed("")
	if req.Operation != "UPDATE" || req.Kind.Group != "" || req.Kind.Version != "v1" {
		return resp
	}
	before, beforeAnn, ok1 := decodeSource(req.Kind.Kind, req.OldObject.Raw)
	after, afterAnn, ok2 := decodeSource(req.Kind.Kind, req.Object.Raw)
	if !ok1 || !ok2 {
		return resp
	}
	names, err := w.rolls(ctx, req.Namespace, after.Ref, before, after, beforeAnn, afterAnn)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "apply-time warning", "namespace", req.Namespace, "object", after.Ref.String())
		return resp
	}
	if len(names) == 0 {
		return resp
	}
	return resp.WithWarnings(RollsWarning(names))
}

// RollsWarning is the warning text for the workloads names ("kind/name").
func RollsWarning(names []string) string {
	shown := names[:min(len(names), MaxWarnedWorkloads)]
	msg := fmt.Sprintf("configstamp: this change rolls %d workload", len(names))
	if len(names) != 1 {
		msg += "s"
	}
	msg += ": " + strings.Join(shown, ", ")
	if more := len(names) - len(shown); more > 0 {
		msg += fmt.Sprintf(" and %d more", more)
	}
	return msg
}

func decodeSource(kind string, raw []byte) (stamp.Source, map[string]string, bool) {
	switch kind {
	case "ConfigMap":
		cm := &corev1.ConfigMap{}
		if err := json.Unmarshal(raw, cm); err != nil {
			return stamp.Source{}, nil, false
		}
		return stamp.SourceFromConfigMap(cm), cm.Annotations, true
	case "Secret":
		s := &corev1.Secret{}
		if err := json.Unmarshal(raw, s); err != nil {
			return stamp.Source{}, nil, false
		}
		return stamp.SourceFromSecret(s), s.Annotations, true
	}
	return stamp.Source{}, nil, false
}

// rolls returns "kind/name" of every workload of namespace that the change of
// ref from before to after rolls, sorted.
func (w *ChangeWarner) rolls(ctx context.Context, namespace string, ref stamp.ObjectRef, before, after stamp.Source, beforeAnn, afterAnn map[string]string) ([]string, error) {
	ns := &corev1.Namespace{}
	if err := w.Cache.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return nil, fmt.Errorf("while reading namespace %s: %w", namespace, err)
	}
	if w.Scope != nil && !w.Scope.InScope(namespace, ns.Labels) {
		return nil, nil
	}
	_, selBefore, _ := stamp.RolloutSelector(beforeAnn)
	_, selAfter, _ := stamp.RolloutSelector(afterAnn)
	var out []string
	for _, kind := range w.Kinds.All() {
		list := kind.NewList()
		opts := []client.ListOption{client.InNamespace(namespace), client.UnsafeDisableDeepCopy}
		if !selBefore && !selAfter { // no selector: only the workloads that reference it
			opts = append(opts, client.MatchingFields{workload.IndexSources: ref.String()})
		}
		if err := w.Cache.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("while listing %s: %w", kind.Resource, err)
		}
		for _, obj := range kind.Items(list) {
			tmpl := kind.PodTemplate(obj)
			if tmpl == nil { // an extra kind's object without a template (workloadRef)
				continue
			}
			refsBefore, inBefore := workload.ReferencesTo(obj.GetAnnotations(), tmpl, ref, beforeAnn)
			refsAfter, inAfter := workload.ReferencesTo(obj.GetAnnotations(), tmpl, ref, afterAnn)
			if refsBefore.Len() == 0 && refsAfter.Len() == 0 {
				continue
			}
			// Handled before and after (workload.Handled); another object's
			// selectors are looked up only when that can make the difference.
			optedIn, _ := stamp.Enabled(obj.GetLabels(), ns.Labels)
			byOthers := false
			if !optedIn && (!inBefore || !inAfter) {
				var err error
				if byOthers, err = w.selectedByOthers(ctx, namespace, ref, tmpl.Labels); err != nil {
					return nil, err
				}
			}
			if before, after := workload.Handled(optedIn, byOthers, inBefore, inAfter); !before || !after {
				continue
			}
			if workload.ChangeRolls(namespace, ref, refsBefore, refsAfter, before, after) {
				out = append(out, strings.ToLower(kind.Name)+"/"+obj.GetName())
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// selectedByOthers reports whether another ConfigMap's or Secret's rollout
// selector in namespace matches the template labels: such a workload is
// managed although it is not opted in.
func (w *ChangeWarner) selectedByOthers(ctx context.Context, namespace string, ref stamp.ObjectRef, templateLabels map[string]string) (bool, error) {
	for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.SecretList{}} {
		if err := w.Cache.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{workload.IndexHasSelector: "true"}, client.UnsafeDisableDeepCopy); err != nil {
			return false, fmt.Errorf("while listing rollout selectors: %w", err)
		}
		var metas []metav1.Object
		var kind stamp.Kind
		switch l := list.(type) {
		case *corev1.ConfigMapList:
			kind = stamp.KindConfigMap
			for i := range l.Items {
				metas = append(metas, &l.Items[i])
			}
		case *corev1.SecretList:
			kind = stamp.KindSecret
			for i := range l.Items {
				metas = append(metas, &l.Items[i])
			}
		}
		for _, m := range metas {
			if (stamp.ObjectRef{Kind: kind, Name: m.GetName()}) == ref {
				continue
			}
			if workload.SelectedBy(templateLabels, m.GetAnnotations()) {
				return true, nil
			}
		}
	}
	return false, nil
}

// WarningsConfiguration is the optional ValidatingWebhookConfiguration of the
// apply-time warnings, for the self-managed mode (the README shows it for
// cert-manager mode). One webhook on ConfigMap and Secret UPDATE,
// scoped like the mutating webhook (scope.NamespaceSelector()). It never
// denies, and failurePolicy Ignore lets the write through when configstamp is
// down or slow; timeoutSeconds 2 bounds what it can add to a write.
// matchConditions (DataChanged) keep metadata-only writes (kubectl annotate,
// label, a controller's status of its own) away from it.
func WarningsConfiguration(name string, scope *workload.Scope, cc admissionregistrationv1.WebhookClientConfig) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "configstamp"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "apply-warnings.configstamp.io",
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"configmaps", "secrets"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](2),
			AdmissionReviewVersions: []string{"v1"},
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: scope.NamespaceSelector()},
			ObjectSelector:          &metav1.LabelSelector{},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "data-changed", Expression: DataChanged}},
		}},
	}
}

// RegisterWarnings creates or updates the ValidatingWebhookConfiguration.
func RegisterWarnings(ctx context.Context, c client.Client, want *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	have := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	return upsert(ctx, c, want, have, "ValidatingWebhookConfiguration", func() { have.Webhooks = want.Webhooks })
}

var _ admission.Handler = &ChangeWarner{}

// UnregisterWarnings deletes the ValidatingWebhookConfiguration name, if it
// exists and configstamp may, so that turning --apply-warnings off leaves no
// webhook pointing at a path nothing serves. Without the permission (an
// installation that never enabled the warnings) there is nothing to delete.
func UnregisterWarnings(ctx context.Context, c client.Client, name string) error {
	have := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, have)
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("while reading ValidatingWebhookConfiguration %s: %w", name, err)
	}
	if err := c.Delete(ctx, have); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("while deleting ValidatingWebhookConfiguration %s: %w", name, err)
	}
	return nil
}
