package workload

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldHold is one field of a workload's spec that configstamp sets while a
// canary runs (a Deployment's surge and minReadySeconds, a StatefulSet's
// partition): where it is, the value set, and the value to put back.
type FieldHold struct {
	Path string `json:"path"`
	Set  any    `json:"set"`
	Was  any    `json:"was"`
}

// Hold is what holds a workload's rollout at its first new pod (see
// Behavior.Hold); empty when its kind or update strategy cannot be held
// (its whole rollout is then the canary).
type Hold []FieldHold

// maxHold bounds a hold read back from a record: a handful of fields.
const maxHold = 8

// holdPaths are the fields a hold may set: a record names no other.
var holdPaths = []string{
	"spec.paused",
	"spec.minReadySeconds",
	"spec.strategy.rollingUpdate.maxSurge",
	"spec.strategy.rollingUpdate.maxUnavailable",
	"spec.updateStrategy.rollingUpdate.partition",
	"spec.updateStrategy.rollingUpdate.maxSurge",
	"spec.updateStrategy.rollingUpdate.maxUnavailable",
}

// Encode is h as a record's value ("" when empty).
func (h Hold) Encode() string {
	if len(h) == 0 {
		return ""
	}
	raw, err := json.Marshal(h)
	if err != nil {
		return ""
	}
	return string(raw)
}

// DecodeHold reads a hold written by Encode; a field it names that no hold
// sets is an error (the record is sealed, so this is a newer release's).
func DecodeHold(s string) (Hold, error) {
	if s == "" {
		return nil, nil
	}
	var h Hold
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("the canary's hold %q is not readable: %w", s, err)
	}
	if len(h) > maxHold {
		return nil, fmt.Errorf("the canary's hold names %d fields, more than %d", len(h), maxHold)
	}
	for _, f := range h {
		if !knownPath(f.Path) {
			return nil, fmt.Errorf("the canary's hold names %q, which no hold sets", f.Path)
		}
	}
	return h, nil
}

func knownPath(p string) bool {
	for _, k := range holdPaths {
		if k == p {
			return true
		}
	}
	return false
}

// SetPatch is the merge patch that sets h's fields.
func (h Hold) SetPatch() map[string]any {
	out := map[string]any{}
	for _, f := range h {
		setPath(out, f.Path, f.Set)
	}
	return out
}

// RestorePatch is the merge patch that puts back each field of h that obj
// still has at the value h set: a user's edit of one since wins (nil when
// nothing is to put back).
func (h Hold) RestorePatch(obj client.Object) (map[string]any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, f := range h {
		now, _, _ := unstructured.NestedFieldNoCopy(u, strings.Split(f.Path, ".")...)
		if sameValue(now, f.Set) {
			setPath(out, f.Path, f.Was)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// Carry returns h with the values to put back taken from prev, the hold
// still set from an earlier canary, for each field obj still has at prev's
// value: a new canary over a held workload puts back the user's values, not
// the held ones.
func (h Hold) Carry(prev Hold, obj client.Object) Hold {
	if len(prev) == 0 {
		return h
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return h
	}
	out := make(Hold, len(h))
	copy(out, h)
	for i := range out {
		for _, p := range prev {
			now, _, _ := unstructured.NestedFieldNoCopy(u, strings.Split(p.Path, ".")...)
			if p.Path == out[i].Path && sameValue(now, p.Set) {
				out[i].Was = p.Was
			}
		}
	}
	// A field the earlier hold set that this one does not: put it back too,
	// when this hold ends; a freeze (a failed canary's) at once.
	for _, p := range prev {
		if !out.has(p.Path) {
			now, _, _ := unstructured.NestedFieldNoCopy(u, strings.Split(p.Path, ".")...)
			switch {
			case !sameValue(now, p.Set): // the user's since
			case isFreeze(p.Path):
				out = append(out, FieldHold{Path: p.Path, Set: p.Was, Was: p.Was})
			default:
				out = append(out, FieldHold{Path: p.Path, Set: p.Set, Was: p.Was})
			}
		}
	}
	return out
}

// freezePaths are the fields a failed canary's freeze sets (Behavior.Freeze):
// a new rollout puts them back at once, it does not carry them (Carry).
var freezePaths = []string{"spec.paused"}

func isFreeze(path string) bool {
	for _, f := range freezePaths {
		if f == path {
			return true
		}
	}
	return false
}

// Freezes reports whether obj still has a freeze field of h at h's value.
func (h Hold) Freezes(obj client.Object) bool {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return false
	}
	for _, f := range h {
		if now, _, _ := unstructured.NestedFieldNoCopy(u, strings.Split(f.Path, ".")...); isFreeze(f.Path) && sameValue(now, f.Set) {
			return true
		}
	}
	return false
}

// ThawOps are the JSON patch operations that put back each freeze field of
// h (a failed canary's spec.paused) that obj still has at h's value: an
// undo returns the workload to its verified revision, which its controller
// rolls only once it is no longer paused. A user's edit since stands.
func (h Hold) ThawOps(obj client.Object) []map[string]any {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil
	}
	var ops []map[string]any
	for _, f := range h {
		now, found, _ := unstructured.NestedFieldNoCopy(u, strings.Split(f.Path, ".")...)
		if !isFreeze(f.Path) || !found || !sameValue(now, f.Set) {
			continue
		}
		path := "/" + strings.ReplaceAll(f.Path, ".", "/")
		if f.Was == nil {
			ops = append(ops, map[string]any{"op": "remove", "path": path})
		} else {
			ops = append(ops, map[string]any{"op": "add", "path": path, "value": f.Was})
		}
	}
	return ops
}

// With is h and the fields of more h does not set.
func (h Hold) With(more Hold) Hold {
	out := append(Hold(nil), h...)
	for _, f := range more {
		if !out.has(f.Path) {
			out = append(out, f)
		}
	}
	return out
}

// Thawed is obj (a copy) with the freeze fields of h put back where obj
// still has them at h's value: the workload as its next rollout finds it
// once that rollout's patch has put them back (Carry).
func (h Hold) Thawed(obj client.Object) client.Object {
	var freeze Hold
	for _, f := range h {
		if isFreeze(f.Path) {
			freeze = append(freeze, f)
		}
	}
	back, err := freeze.RestorePatch(obj)
	if err != nil || back == nil {
		return obj
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return obj
	}
	for _, f := range freeze {
		parts := strings.Split(f.Path, ".")
		if f.Was == nil {
			unstructured.RemoveNestedField(u, parts...)
		} else if err := unstructured.SetNestedField(u, f.Was, parts...); err != nil {
			return obj
		}
	}
	out, ok := obj.DeepCopyObject().(client.Object)
	if !ok || runtime.DefaultUnstructuredConverter.FromUnstructured(u, out) != nil {
		return obj
	}
	return out
}

// Paths are the fields h sets.
func (h Hold) Paths() []string {
	out := make([]string, len(h))
	for i, f := range h {
		out[i] = f.Path
	}
	return out
}

func (h Hold) has(path string) bool {
	for _, f := range h {
		if f.Path == path {
			return true
		}
	}
	return false
}

// sameValue compares two JSON values as JSON (a number read back from a
// record is a float64, from an object an int64).
func sameValue(a, b any) bool {
	ra, errA := json.Marshal(a)
	rb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ra) == string(rb)
}

// setPath sets a dotted path in a merge patch.
func setPath(m map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}

// holdBuilder collects the fields a hold changes (a field already at the
// value a hold wants is left alone).
type holdBuilder struct{ h Hold }

func (b *holdBuilder) set(path string, was, set any) {
	w, s := jsonValue(was), jsonValue(set)
	if !sameValue(w, s) {
		b.h = append(b.h, FieldHold{Path: path, Set: s, Was: w})
	}
}

// jsonValue is v as it reads back from JSON (nil for a nil pointer).
func jsonValue(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	if json.Unmarshal(raw, &out) != nil {
		return nil
	}
	return out
}

// windowSeconds is window in whole seconds, rounded up.
func windowSeconds(window time.Duration) int32 {
	return int32((window + time.Second - 1) / time.Second)
}

// LateReadyMargin is added to the window in a held canary's
// minReadySeconds. The workload's own controller counts the new pod
// available from its Ready condition's transition time, which the kubelet of
// a busy node writes late (10 s, and a crash 23 s, on this project's
// real-node tests); configstamp counts the window from that write
// (rollout.InspectPods) and lifts the hold when the canary passes. With the
// margin, the controller makes no second new pod before configstamp judged
// the first, for a Ready written up to this late.
const LateReadyMargin = time.Minute

// HeldMinReady is the minReadySeconds a canary is held with for window: the
// window and LateReadyMargin, below limit (a Deployment's
// progressDeadlineSeconds; 0: none). The API server rejects a Deployment
// whose minReadySeconds is not less than its progressDeadlineSeconds, and
// the deadline counts from the pod's Ready, so a hold at or past it would
// fail every stamp write, or the rollout in its own controller. A window
// at or past the limit is held for limit-1 seconds: the controller may go
// on to its second new pod before configstamp judged the first for the
// whole window (docs/rollout-safety.md says so). A window of 0 holds no
// time: the canary passes on its first Ready, as reported, and so may its
// controller.
func HeldMinReady(window time.Duration, limit int32) int32 {
	if window <= 0 {
		return 0
	}
	held := windowSeconds(window + LateReadyMargin)
	if limit > 0 {
		held = min(held, limit-1)
	}
	return held
}

// rollingHold holds a rolling update of replicas pods at one new pod: a
// surge of one and none unavailable, or, where the user allows no surge,
// one unavailable; and minReadySeconds at least HeldMinReady (limit: its
// cap), so the workload's own controller counts the new pod available, and
// goes on, only once it stayed Ready that long. surge and unavailable are
// the user's (nil: the API's default, 25%).
func rollingHold(b *holdBuilder, prefix string, replicas int32, surge, unavailable *intstr.IntOrString, minReady int32, window time.Duration, limit int32) {
	def := intstr.FromString("25%")
	s, _ := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(surge, def), int(replicas), true)
	wantSurge, wantUnavailable := intstr.FromInt32(1), intstr.FromInt32(0)
	if s == 0 {
		wantSurge, wantUnavailable = intstr.FromInt32(0), intstr.FromInt32(1)
	}
	b.set(prefix+".maxSurge", surge, wantSurge)
	b.set(prefix+".maxUnavailable", unavailable, wantUnavailable)
	if held := HeldMinReady(window, limit); held > minReady {
		b.set("spec.minReadySeconds", orNil(minReady), held)
	}
}

// orNil: a zero minReadySeconds is absent from the object.
func orNil(n int32) any {
	if n == 0 {
		return nil
	}
	return n
}
