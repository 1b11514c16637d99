package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Path is where the webhook serves every workload kind.
const Path = "/mutate-workloads"

// RBAC for the MutatingWebhookConfiguration has no marker: only self mode writes it (get/update/patch of its own name, config/selfsigned).

// Setup registers the webhook on the manager's webhook server. resolver must
// read sources live; the cache is used for Namespaces and selector discovery.
// self is configstamp's own user name (see Stamper.Self). scope is the
// installation's (see Stamper.Scope). snapshots, when set, pins the workloads that
// ask for it (see Stamper.Snapshots). rings selects the namespaces that may be
// in a ring (a halt of ring 0 holds the rings above; nil: every namespace).
func Setup(mgr ctrl.Manager, resolver *workload.Resolver, self string, scope *workload.Scope, snapshots *pin.Snapshots, kinds *workload.Registry,
	rings labels.Selector) error {
	decoder := admission.NewDecoder(mgr.GetScheme())
	halts := &rollout.Halts{Reader: mgr.GetCache(), Resolver: &workload.Resolver{Sources: mgr.GetClient(), Index: mgr.GetCache(), Keys: resolver.Keys}, Kinds: kinds,
		Rings: &rollout.Rings{Reader: mgr.GetCache(), Selector: rings}}
	rollout.RegisterMetrics(kinds) // configstamp_warnings_total
	recorder := rollout.CountWarnings(mgr.GetEventRecorder("configstamp-webhook"))
	s := &Stamper{Resolver: resolver, Cache: mgr.GetCache(), Recorder: recorder, Decoder: decoder, Self: self, Scope: scope,
		Snapshots: snapshots, Halts: halts, Kinds: kinds}
	mgr.GetWebhookServer().Register(Path, &admission.Webhook{Handler: withWarnings{Handlers(mgr.GetScheme(), s)}})
	return nil
}

// Handlers is one handler per kind of s.Kinds: each decodes a request into
// its kind's object and stamps it with s.
func Handlers(scheme *runtime.Scheme, s *Stamper) admission.Handler {
	handlers := byKind{}
	for _, k := range s.Kinds.All() {
		handlers[k.GroupKind()] = admission.WithCustomDefaulter(scheme, k.New(), s).Handler
	}
	return handlers
}

// byKind dispatches a request to the handler of its kind.
type byKind map[schema.GroupKind]admission.Handler

func (b byKind) Handle(ctx context.Context, req admission.Request) admission.Response {
	h, ok := b[schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}]
	if !ok {
		return admission.Allowed("not a workload")
	}
	return h.Handle(ctx, req)
}

// Configuration is configstamp's MutatingWebhookConfiguration, for the
// self-managed mode (the kustomize manifests in config/webhook say the same).
//
// Three webhooks with disjoint selectors, so that each write is sent at most once
// and every other workload write never reaches configstamp:
//   - "workloads": workloads labelled configstamp.io/enabled=true;
//   - "namespaces": in namespaces labelled configstamp.io/enabled=true, workloads
//     whose label is absent or malformed ("false" opts out);
//   - "malformed": elsewhere, workloads whose label is malformed, only to warn.
//
// All exclude configstamp's own namespace and kube-system, so configstamp can
// never block its own start (ScopedConfiguration adds the rest of a scope).
// failurePolicy Ignore: if configstamp is down,
// writes go through unstamped and the reconciler records or stamps them later.
// timeoutSeconds 5: a stamp needs a few GETs; a slow API server should not hold
// a user's kubectl apply for the default 10 s.
func Configuration(name, ownNamespace string, cc admissionregistrationv1.WebhookClientConfig, kinds *workload.Registry) *admissionregistrationv1.MutatingWebhookConfiguration {
	scope, err := workload.NewScope(ownNamespace, nil, nil, "")
	if err != nil { // only an invalid own namespace name, which the API server would refuse anyway
		panic(err)
	}
	return ScopedConfiguration(name, scope, cc, kinds)
}

// MayRestamp is the webhooks' match condition: the API server calls
// configstamp only for a write that can change what it decides. That is a
// CREATE; an UPDATE of an extra kind (its template may sit anywhere); and an
// UPDATE of a Deployment, StatefulSet or DaemonSet that changes its spec, its
// labels (opt-in) or one of its configstamp.io/ annotations (pinning, extra
// references, a data record to restore), except the rollout record's, which
// only the reconciler reads. So an UPDATE that only touches other annotations
// (the Deployment controller's revision, kubectl annotate) or the rollout
// record (the reconciler closing it, a resume) never waits on configstamp.
var MayRestamp = "request.operation != 'UPDATE' || request.kind.group != 'apps' || object.spec != oldObject.spec || " +
	"object.metadata.?labels.orValue({}) != oldObject.metadata.?labels.orValue({}) || " +
	"[object, oldObject].exists(o, o.metadata.?annotations.orValue({}).exists(k, k.startsWith('configstamp.io/') && " +
	"!(k in ['" + strings.Join(rollout.RecordAnnotations, "', '") + "']) && " +
	"object.metadata.?annotations.orValue({})[?k] != oldObject.metadata.?annotations.orValue({})[?k]))"

// ScopedConfiguration is Configuration for an installation scoped by scope:
// every webhook's namespaceSelector starts with scope.NamespaceSelector() (the
// excluded namespaces, own first; the watched ones; the namespace label
// selector), so the API server never sends configstamp a workload out of its
// scope, and a second installation on other namespaces never sees this one's.
func ScopedConfiguration(name string, scope *workload.Scope, cc admissionregistrationv1.WebhookClientConfig, kinds *workload.Registry) *admissionregistrationv1.MutatingWebhookConfiguration {
	rules := Rules(kinds)
	entry := func(id string, objSel, nsSel []metav1.LabelSelectorRequirement) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    id + ".configstamp.io",
			ClientConfig:            cc,
			Rules:                   rules,
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: objSel},
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: append(scope.NamespaceSelector(), nsSel...)},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "may-restamp", Expression: MayRestamp}},
		}
	}
	label := stamp.LabelEnabled
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "configstamp"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			entry("workloads",
				[]metav1.LabelSelectorRequirement{{Key: label, Operator: metav1.LabelSelectorOpIn, Values: []string{"true"}}}, nil),
			entry("namespaces",
				[]metav1.LabelSelectorRequirement{{Key: label, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true", "false"}}},
				[]metav1.LabelSelectorRequirement{{Key: label, Operator: metav1.LabelSelectorOpIn, Values: []string{"true"}}}),
			entry("malformed",
				[]metav1.LabelSelectorRequirement{
					{Key: label, Operator: metav1.LabelSelectorOpExists},
					{Key: label, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true", "false"}}},
				[]metav1.LabelSelectorRequirement{{Key: label, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}}}),
		},
	}
}

// Rules are the webhook's rules: CREATE and UPDATE of the built-in workload
// kinds, then of each extra kind of --kinds-config (registered only when its
// CRD exists).
func Rules(kinds *workload.Registry) []admissionregistrationv1.RuleWithOperations {
	rule := func(group, version string, resources ...string) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version},
				Resources: resources, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}
	}
	var rules []admissionregistrationv1.RuleWithOperations
	for _, k := range kinds.All() {
		gvr := k.GVR()
		// The built-in kinds share apps/v1: one rule names them all.
		if n := len(rules); n > 0 && !k.Unstructured() && rules[n-1].APIGroups[0] == gvr.Group && rules[n-1].APIVersions[0] == gvr.Version {
			rules[n-1].Resources = append(rules[n-1].Resources, gvr.Resource)
			continue
		}
		rules = append(rules, rule(gvr.Group, gvr.Version, gvr.Resource))
	}
	return rules
}

// Register creates or updates the MutatingWebhookConfiguration.
func Register(ctx context.Context, c client.Client, want *admissionregistrationv1.MutatingWebhookConfiguration) error {
	have := &admissionregistrationv1.MutatingWebhookConfiguration{}
	return upsert(ctx, c, want, have, "MutatingWebhookConfiguration", func() { have.Webhooks = want.Webhooks })
}

// upsert creates want or, when it exists (read into have), updates it with
// want's webhooks (copyWebhooks) and the labels it lacks. It changes no label:
// an installed configuration carries the overlay's labels
// (app.kubernetes.io/managed-by: kustomize among them), and overwriting them
// would undo every `kubectl apply`. Replicas starting together write the same
// configuration: a conflict is read again and retried, not a failed start.
func upsert[T client.Object](ctx context.Context, c client.Client, want, have T, kind string, copyWebhooks func()) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		return upsertOnce(ctx, c, want, have, kind, copyWebhooks)
	})
}

func upsertOnce[T client.Object](ctx context.Context, c client.Client, want, have T, kind string, copyWebhooks func()) error {
	err := c.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("while creating %s %s: %w", kind, want.GetName(), err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("while reading %s %s: %w", kind, want.GetName(), err)
	}
	copyWebhooks()
	labels := have.GetLabels()
	for k, v := range want.GetLabels() {
		if _, ok := labels[k]; !ok {
			if labels == nil {
				labels = map[string]string{}
			}
			labels[k] = v
		}
	}
	have.SetLabels(labels)
	if err := c.Update(ctx, have); err != nil {
		return fmt.Errorf("while updating %s %s: %w", kind, want.GetName(), err) // %w: RetryOnConflict sees a conflict
	}
	return nil
}

var _ http.Handler = &admission.Webhook{}
