package webhook

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/workload"
)

// ReasonUntriedChange is the Warning event (and admission warning) of a
// user's update of an unpinned workload while a change of a source it
// reads is halted, or still tried by another workload's canary.
const ReasonUntriedChange = "UntriedChange"

// untried warns when c, a user's UPDATE of an unpinned workload obj, makes
// its pods again while a change of a source it reads, not rolled to it yet,
// is halted in its namespace or still tried by another workload's canary:
// its new pods read that source as it is now. Kubernetes gives configstamp
// no way to hold back what an unpinned pod reads (a pinned workload keeps
// its snapshots: halted); the user learns it where they look, and can pin.
func (s *Stamper) untried(ctx context.Context, c call, obj client.Object, comp *workload.Computation) {
	if c.req.Operation != admissionv1.Update || c.pinning || s.Halts == nil || c.req.UserInfo.Username == s.Self {
		return
	}
	old := c.old
	if old == nil {
		return
	}
	causes := rollout.Causes(old.GetAnnotations(), comp.Sources)
	if len(causes) == 0 {
		return
	}
	what := "failed on another workload and is halted"
	change, err := s.Halts.By(ctx, c.req.Namespace, causes)
	if err == nil && change == "" {
		what = "is still being tried on another workload, its canary"
		change, err = s.Halts.Canary(ctx, c.req.Namespace, rollout.Key{Kind: c.kind.Name, Namespace: c.req.Namespace, Name: old.GetName()}, causes)
	}
	if err != nil {
		c.logger.Error(err, "while looking up halts and canaries for a user's update; admitted without a warning")
		return
	}
	if change == "" {
		return
	}
	s.warn(ctx, obj, c.req.Namespace, ReasonUntriedChange, "Stamp", fmt.Sprintf("the change %s %s; this update makes new pods, and they read "+
		"the ConfigMap/Secret as it is now, with that change: Kubernetes gives configstamp no way to hold back what an unpinned pod reads "+
		"(with %s: \"true\" this workload would keep its snapshot until the change passed)", change, what, pin.AnnotationPin), c.dryRun)
}
