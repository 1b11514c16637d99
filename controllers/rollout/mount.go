package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// MountGrace is how long a pod of the new revision may wait for its volumes
// before a ConfigMap or Secret its template needs, and that source lacks
// (Unmountable), fails its rollout. The kubelet mounts a ConfigMap in well
// under a second; the grace only covers a kubelet whose view of the source
// is a moment older than configstamp's.
const MountGrace = 10 * time.Second

// Unmountable says what of spec's ConfigMap and Secret volumes, and of the
// ConfigMaps and Secrets of its projected volumes, the kubelet cannot mount
// with sources, the data configstamp resolved and hashed for the stamp (by
// their names in spec: a pinned template's SourceSpec): a source that does
// not exist, or a key an `items:` entry names and its source does not have.
// The kubelet then leaves the pod in ContainerCreating, with FailedMount
// events ("configmap references non-existent config key"), until the source
// has it. An optional volume or projection (the kubelet skips what is
// missing), a source configstamp does not hash (configstamp.io/ignore, not
// read) and one beyond stamp.MaxKeyDigests keys (its keys are not known one
// by one) say nothing. nil: nothing is missing.
func Unmountable(spec *corev1.PodSpec, sources map[stamp.ObjectRef]stamp.Source) []string {
	var out []string
	need := func(volume string, ref stamp.ObjectRef, items []corev1.KeyToPath, optional *bool) {
		src, ok := sources[ref]
		switch {
		case optional != nil && *optional, !ok, src.Ignored:
			return
		case !src.Present:
			out = append(out, fmt.Sprintf("volume %q needs %s, which does not exist", volume, ref))
			return
		case src.Combined:
			return
		}
		for _, item := range items {
			if _, has := src.Digests[item.Key]; !has {
				out = append(out, fmt.Sprintf("volume %q needs key %q of %s, which %s does not have", volume, item.Key, ref, ref))
			}
		}
	}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			need(v.Name, stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: v.ConfigMap.Name}, v.ConfigMap.Items, v.ConfigMap.Optional)
		case v.Secret != nil:
			need(v.Name, stamp.ObjectRef{Kind: stamp.KindSecret, Name: v.Secret.SecretName}, v.Secret.Items, v.Secret.Optional)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.ConfigMap != nil:
					need(v.Name, stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: s.ConfigMap.Name}, s.ConfigMap.Items, s.ConfigMap.Optional)
				case s.Secret != nil:
					need(v.Name, stamp.ObjectRef{Kind: stamp.KindSecret, Name: s.Secret.Name}, s.Secret.Items, s.Secret.Optional)
				}
			}
		}
	}
	return slices.Compact(out) // a projection may name one key twice
}

// WaitsForVolumes reports whether a pod of the revision stamped hash (and not
// being deleted) waits for its volumes (waitingForVolumes): only then is
// Unmountable worth asking.
func WaitsForVolumes(pods []corev1.Pod, hash string) bool {
	for i := range pods {
		p := &pods[i]
		if _, ok := waitingForVolumes(p); ok && p.Annotations[stamp.AnnotationHash] == hash && p.DeletionTimestamp == nil {
			return true
		}
	}
	return false
}

// startingReasons are the waiting reasons the kubelet gives the containers of
// a pod it has not started yet.
var startingReasons = []string{"ContainerCreating", "PodInitializing"}

// waitingForVolumes reports whether p's kubelet has it and has started none
// of its containers yet — each waits in ContainerCreating (PodInitializing
// with init containers) and never ran — without its sandbox
// (PodReadyToStartContainers is not True: the kubelet makes the sandbox once
// the volumes are mounted, so an image pull does not count where the node
// reports it), and since when: its scheduling.
func waitingForVolumes(p *corev1.Pod) (time.Time, bool) {
	statuses := allStatuses(p)
	if p.Status.Phase != corev1.PodPending || p.Spec.NodeName == "" || len(statuses) == 0 {
		return time.Time{}, false
	}
	for _, cs := range statuses {
		if w := cs.State.Waiting; w == nil || !slices.Contains(startingReasons, w.Reason) || cs.RestartCount > 0 || cs.LastTerminationState.Terminated != nil {
			return time.Time{}, false
		}
	}
	since := p.CreationTimestamp.Time
	for _, c := range p.Status.Conditions {
		switch {
		case c.Type == corev1.PodReadyToStartContainers && c.Status == corev1.ConditionTrue:
			return time.Time{}, false
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && c.LastTransitionTime.After(since):
			since = c.LastTransitionTime.Time
		}
	}
	return since, true
}

// volumeProblem: p has waited for its volumes past MountGrace while its
// template needs what its sources lack (seen.Unmountable).
func volumeProblem(p *corev1.Pod, seen PodsSeen) string {
	if len(seen.Unmountable) == 0 {
		return ""
	}
	since, ok := waitingForVolumes(p)
	if !ok || seen.Now.Before(since.Add(MountGrace)) {
		return ""
	}
	return fmt.Sprintf("cannot start: it has waited in ContainerCreating since %s and the kubelet cannot mount its volumes (FailedMount): %s",
		since.UTC().Format(time.RFC3339), strings.Join(seen.Unmountable, "; "))
}

// mountBy is when p, waiting for volumes its sources cannot fill, has had
// MountGrace (zero: it does not wait, or nothing is missing).
func mountBy(p *corev1.Pod, seen PodsSeen) time.Time {
	if len(seen.Unmountable) == 0 {
		return time.Time{}
	}
	if since, ok := waitingForVolumes(p); ok {
		return since.Add(MountGrace)
	}
	return time.Time{}
}
