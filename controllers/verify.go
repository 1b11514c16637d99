package controllers

import (
	"context"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Pods are read, never cached: only the few workloads whose rollout is
// verifying (at most the budget) or whose failed rollout halts its change
// need them, and a pod cache would grow with the cluster.
// +kubebuilder:rbac:groups="",resources=pods,verbs=list

// podsListOptions: how the pods of a rollout judged by rule are listed.
// ResourceVersion "0" is served from the API server's watch cache, not
// etcd: a poll a moment behind is judged again at the next. But a halt's
// lift (RuleLasting) must not rest on a stale list: on a saturated
// machine the watch cache showed a crashing pod Ready 20 s after its
// container had exited again, and the halt lifted (TestFailuresAfterReady
// in test/realnode); a halted workload's pods are read consistently.
func podsListOptions(rule rollout.Rule) *client.ListOptions {
	if rule == rollout.RuleLasting {
		return &client.ListOptions{}
	}
	return &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}
}

// ReasonPodsUnreadable: configstamp may not list pods, so it judges
// rollouts by the workloads' status alone.
const ReasonPodsUnreadable = "PodsUnreadable"

// verification is what the rules need to judge obj's rollout beyond its
// status: its verification window and, while its pods are watched
// (rollout.Watched: its rollout is open, its failure halts its change, or it
// completed a change that still rolls to other workloads), what the pods of
// its current revision (its own pods, stamped like its template) show, read
// live at each judgement: on a status change of the workload, at each poll
// of an open rollout (rollout.PodPoll) and at the window's end. Only a
// record configstamp sealed asks for the read, so a tenant's hand-written
// state costs nothing. A read that fails leaves the pods unread (the rollout
// is not completed unseen, no halt lifts) and the rest of the reconcile goes
// on: a fix can still supersede it.
func (r *kindReconciler) verification(ctx context.Context, obj client.Object) rollout.Verification {
	window, _ := rollout.VerifyWindow(obj.GetAnnotations(), r.Scheduler.Policy.VerifyWindow) // a bad value is told by compute
	v := rollout.Verification{Window: rollout.EffectiveWindow(r.Kind, obj, window)}
	// Most workloads and most reconciles read nothing, and check no seal: no
	// record, a failure that halts nothing, or a completed rollout whose
	// change no longer rolls anywhere.
	as := rollout.Read(obj.GetAnnotations())
	key := rollout.Key{Kind: r.Kind.Name, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	switch ongoing := as.State == rollout.Completed && r.Scheduler.Ongoing(ctx, key, rollout.ParseChanges(as.Cause)); {
	case as.State == rollout.None, as.State == rollout.Failed && as.Halted == "":
		return v
	case as.State == rollout.Completed:
		log.FromContext(ctx).V(1).Info("completed rollout", "changeStillRolls", ongoing)
		if !ongoing {
			return v
		}
	}
	rec, err := rollout.Unseal(obj, r.Scheduler.Keys)
	if err != nil {
		return v
	}
	complete, _ := rollout.Complete(r.Kind, obj, v)
	rule, watched := rollout.Watched(rec, complete, rec.State == rollout.Completed)
	tmpl := r.Kind.PodTemplate(obj)
	if !watched || r.APIReader == nil || tmpl == nil || len(tmpl.Labels) == 0 {
		return v
	}
	now := time.Now()
	seen := rollout.PodsSeen{Rule: rule, Hash: tmpl.Annotations[stamp.AnnotationHash], Started: rec.Started, Now: now}
	switch rule {
	case rollout.RuleVerifying:
		seen.From = rec.Until.Add(-v.Window)
	case rollout.RuleLasting: // crashes before the last window are history
		seen.Started = now.Add(-v.Window)
	case rollout.RuleCrashing:
		// Only a crash now counts (each one wakes this reconcile: it changes
		// the workload's ready counts), not one from long ago.
		seen.Started = latest(rec.Started, now.Add(-max(v.Window, time.Minute)))
	}
	pods := &corev1.PodList{}
	err = r.APIReader.List(ctx, pods, client.InNamespace(obj.GetNamespace()), client.MatchingLabels(tmpl.Labels), podsListOptions(rule))
	switch {
	case apierrors.IsForbidden(err):
		// An installation whose RBAC predates verification: judged by the
		// workload's status only, and said so once per workload and process.
		if _, told := r.podsUnreadable.LoadOrStore(obj.GetUID(), true); !told {
			r.note(corev1.EventTypeWarning, ReasonPodsUnreadable, "Verify",
				"configstamp may not list pods (%s): its rollouts are judged by the workload's status only; a crash, a config error or a lost readiness "+
					"is seen only at the progress deadline. Grant list on pods (config/rbac)", err.Error())
		}
		return v
	case err != nil:
		log.FromContext(ctx).Error(err, "while reading the pods of a rollout")
		v.Unread = true
		return v
	}
	seen.Pods = rollout.OwnPods(obj, pods.Items)
	var stalled []string
	if rule == rollout.RuleRolling || rule == rollout.RuleVerifying {
		if rollout.WaitsForVolumes(seen.Pods, seen.Hash) {
			seen.Unmountable = r.unmountable(ctx, obj, tmpl, seen.Hash)
		}
		seen.NodesNotReady, stalled = r.nodesNotReady(ctx, obj, rec, seen)
	}
	found := rollout.InspectPods(seen)
	found.NotWaitedFor, found.StalledBy = seen.NodesNotReady, stalled
	log.FromContext(ctx).V(1).Info("pods judged", "rule", rule, "pods", len(seen.Pods), "problem", found.Problem, "healthy", found.Healthy)
	found.Window, found.PollScale = v.Window, r.Scheduler.PollScale()
	return found
}

// unmountable is what the volumes of obj's template tmpl need that their
// sources lack (rollout.Unmountable), read from the cache as the reconciler
// reads them, and only when that is the data the template was stamped with
// (hash): the pods of the stamp were made for it. Data changed since (a newer
// change on its way, which will supersede the rollout) or unreadable says
// nothing. Asked only while a pod of the revision waits for its volumes.
func (r *kindReconciler) unmountable(ctx context.Context, obj client.Object, tmpl *corev1.PodTemplateSpec, hash string) []string {
	if r.Resolver == nil || hash == "" {
		return nil
	}
	comp, err := r.Resolver.Compute(ctx, obj.GetNamespace(), obj.GetAnnotations(), tmpl)
	if err != nil {
		log.FromContext(ctx).V(1).Info("sources unreadable: a pod waiting for its volumes is judged at the deadline", "error", err.Error())
		return nil
	}
	if !comp.HashedAs(r.Resolver.Keys, obj.GetNamespace(), hash) {
		return nil
	}
	return rollout.Unmountable(pin.SourceSpec(tmpl), comp.Data)
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get

// ReasonNodesNotReady: a DaemonSet's rollout does not wait for its pods on
// NotReady nodes.
const ReasonNodesNotReady = "NodesNotReady"

// ReasonStalledByNodes: a DaemonSet's own controller updates no further node
// while its pods on NotReady nodes use up its maxUnavailable.
const ReasonStalledByNodes = "RolloutStalledByNodes"

// maxNodeReads bounds the nodes read for one judgement of a DaemonSet: a
// rollout with more nodes still to do is under way, not held by a few
// NotReady nodes.
const maxNodeReads = 8

// nodesNotReadyTold: the DaemonSets (by UID) told, for their current stamp,
// that their rollout does not wait for some nodes (once per stamp and
// process; one entry per DaemonSet).
var nodesNotReadyTold sync.Map

// nodesNotReady returns the NotReady nodes that alone keep the rollout of
// a kind with one pod per node (Kind.Nodes: a DaemonSet) from complete
// (NodeRollout.NotWaitedFor; the judgement counts it complete without them:
// rollout.StatusSeen); nil for any other workload or rollout. stalled are
// the NotReady nodes that stall its rolling update in its own controller
// (NodeRollout.StalledBy): its rollout is then not failed at the
// deadline, and once it has run that long a Warning says why. Nodes are not cached:
// only the few nodes (at most maxNodeReads) where the rollout is not done
// are read, live from the API server's watch cache, and only while a
// DaemonSet's status does not count it complete. Without `get` on nodes
// (a namespaced installation) its rollout waits for every node, as before.
func (r *kindReconciler) nodesNotReady(ctx context.Context, obj client.Object, rec rollout.Record, seen rollout.PodsSeen) (notReady, stalled []string) {
	perNode := r.Kind.Nodes(obj)
	if perNode == nil || r.Kind.Status(obj).Complete {
		return nil, nil
	}
	unfinished := perNode.Unfinished(seen.Pods, seen.Hash, seen.Now)
	if len(unfinished) == 0 || len(unfinished) > maxNodeReads {
		return nil, nil
	}
	nodes := make(map[string]workload.NodeState, len(unfinished))
	for _, name := range unfinished {
		n := &corev1.Node{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, n, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}}); err != nil {
			// Gone: the pod garbage collector removes its pods, and the
			// status then counts without it. Forbidden: waits, as before.
			log.FromContext(ctx).V(1).Info("node unread: the DaemonSet's rollout waits for it", "node", name, "error", err.Error())
			return nil, nil
		}
		nodes[name] = workload.NodeStateOf(n)
	}
	notReady = perNode.NotWaitedFor(seen.Pods, seen.Hash, unfinished, nodes)
	if len(notReady) == 0 {
		stalled = perNode.StalledBy(unfinished, nodes)
		r.tellStalled(ctx, obj, rec, seen, stalled)
		return nil, stalled
	}
	if told, _ := nodesNotReadyTold.Swap(obj.GetUID(), seen.Hash); told != seen.Hash {
		log.FromContext(ctx).Info("the DaemonSet's rollout does not wait for its pods on NotReady nodes", "nodes", notReady)
		r.note(corev1.EventTypeWarning, ReasonNodesNotReady, "Verify",
			"the rollout does not wait for the pods on NotReady nodes %s: they cannot be replaced until the node is Ready again or deleted; "+
				"it is complete once every pod on a Ready node is updated and available", strings.Join(notReady, ", "))
	}
	return notReady, nil
}

// stalledTold: the DaemonSets (by UID) told, for their current stamp, that
// NotReady nodes stall their rolling update (once per stamp and process).
var stalledTold sync.Map

// tellStalled says, once per stamp, that a DaemonSet's rollout stalled by
// NotReady nodes (stalled) is not failed, once it has run for the progress
// deadline (before then, it may still be under way).
func (r *kindReconciler) tellStalled(ctx context.Context, obj client.Object, rec rollout.Record, seen rollout.PodsSeen, stalled []string) {
	if len(stalled) == 0 || seen.Now.Sub(rec.Started) < r.Scheduler.Policy.ProgressDeadline {
		return
	}
	if told, _ := stalledTold.Swap(obj.GetUID(), seen.Hash); told == seen.Hash {
		return
	}
	log.FromContext(ctx).Info("the DaemonSet's own controller waits for NotReady nodes; its rollout is not failed", "nodes", stalled)
	r.note(corev1.EventTypeWarning, ReasonStalledByNodes, "Verify",
		"the DaemonSet's controller updates no further node while its pods on NotReady nodes %s use up its maxUnavailable (kubernetes/kubernetes#117204): "+
			"configstamp does not fail the change for it; the rollout goes on once those nodes are Ready again or deleted. "+
			"Give node agents a maxUnavailable above the number of nodes that may be down at once", strings.Join(stalled, ", "))
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
