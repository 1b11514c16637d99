package webhook

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// ReasonUndoKept is the Warning event of an UPDATE that brought back an
// earlier stamp (kubectl rollout undo) which configstamp replaced by the
// current one: nothing rolls back.
const ReasonUndoKept = "UndoKeptConfig"

// undone handles a user's UPDATE that sets the template's stamp to one that
// is neither the current stamp nor the one configstamp keeps (current: the
// hash computed now, or for a pinned workload the stamp stampFor kept across
// a key rotation): an undo to an
// earlier revision (kubectl rollout undo), whose template differs from the
// current one in the stamp, while the ConfigMaps and Secrets hold the current
// data. The stamp is replaced by the current one as always, so the undo rolls
// nothing back; undone says so, with an admission warning (kubectl prints it
// under "rolled back") and a Warning event. An undo also sets the workload's
// annotations to the earlier revision's, which drops configstamp's rollout
// record: undone keeps it, so that an undo that changed nothing cannot lift a
// halt (only a real recovery, or removing configstamp.io/halted, does).
func (s *Stamper) undone(ctx context.Context, c call, obj client.Object, current string) {
	sent, old := c.sent, c.old
	if sent == "" || sent == current || old == nil {
		return
	}
	oldT := c.kind.PodTemplate(old)
	if oldT == nil || oldT.Annotations[stamp.AnnotationHash] == sent {
		return
	}
	keepRolloutRecord(obj, old)
	msg := fmt.Sprintf("this update brings back the stamp %s=%s of an earlier configuration (kubectl rollout undo?), "+
		"but the ConfigMaps and Secrets it references hold the current data: configstamp kept the current stamp %s and the pods keep the current configuration. "+
		"To go back, revert the ConfigMap or Secret (configstamp then rolls the workload)", stamp.AnnotationHash, sent, current)
	s.warn(ctx, obj, c.req.Namespace, ReasonUndoKept, "Stamp", msg, c.dryRun)
}

// keepRolloutRecord puts back on obj each annotation of configstamp's rollout
// record that old had and obj lost: an undo sets the workload's annotations to
// the earlier revision's.
func keepRolloutRecord(obj, old client.Object) {
	meta := obj.GetAnnotations()
	if meta == nil {
		meta = map[string]string{}
	}
	for _, k := range rollout.RecordAnnotations {
		if v, ok := old.GetAnnotations()[k]; ok {
			if _, kept := meta[k]; !kept {
				meta[k] = v
			}
		}
	}
	obj.SetAnnotations(meta)
}
