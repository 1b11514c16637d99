package webhook

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// ReasonUndoKept is the Warning event of an UPDATE that brought back an
// earlier stamp (kubectl rollout undo) which configstamp replaced by the
// current one: nothing rolls back.
const ReasonUndoKept = "UndoKeptConfig"

// warnIfUndone says so, with an admission warning (kubectl prints it under
// "rolled back") and a Warning event, when a user's UPDATE sets the template's
// stamp to one that is neither the current stamp nor the one computed now:
// an undo to an earlier revision, whose template differs from the current one
// in the stamp, while the ConfigMaps and Secrets hold the current data. The
// stamp is replaced by the current one as always, so the undo rolls nothing
// back; silently, that would look as if it had.
func (s *Stamper[T]) warnIfUndone(ctx context.Context, obj client.Object, req admission.Request, sent, current string, dryRun bool) {
	if sent == "" || sent == current {
		return
	}
	old := s.newObject()
	if err := s.Decoder.DecodeRaw(req.OldObject, old); err != nil {
		return
	}
	oldT := workload.PodTemplate(old)
	if oldT == nil || oldT.Annotations[stamp.AnnotationHash] == sent {
		return
	}
	msg := fmt.Sprintf("this update brings back the stamp %s=%s of an earlier configuration (kubectl rollout undo?), "+
		"but the ConfigMaps and Secrets it references hold the current data: configstamp kept the current stamp %s and the pods keep the current configuration. "+
		"To go back, revert the ConfigMap or Secret (configstamp then rolls the workload)", stamp.AnnotationHash, sent, current)
	s.warn(ctx, obj, req.Namespace, ReasonUndoKept, "Stamp", msg, dryRun)
}
