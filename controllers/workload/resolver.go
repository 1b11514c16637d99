package workload

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// Resolver computes a workload's stamp. The reconciler reads sources from the
// manager's cache (digested objects); the webhook reads them live from the API
// server, so that a ConfigMap and a Deployment applied milliseconds apart are
// seen consistently. Both give the same hash for the same data.
type Resolver struct {
	// Sources is where referenced ConfigMaps and Secrets are read.
	Sources client.Reader
	// Index is the cache, used to find the ConfigMaps and Secrets of a namespace
	// that carry a rollout selector (IndexHasSelector).
	Index client.Reader
	// Keys holds the installation key; one computation uses the key in force
	// throughout.
	Keys *stamp.Keyring
	// Parallel reads the sources concurrently (for live reads; a cache read
	// costs nothing to wait for), at most MaxReadsPerCompute at once for one
	// computation. The bound on all computations together (all admissions) is
	// the live reader's (webhook/live).
	Parallel bool
	// MaxReadsPerCompute bounds one computation's concurrent reads (Parallel);
	// 0 is DefaultReadsPerCompute.
	MaxReadsPerCompute int
}

// DefaultReadsPerCompute bounds one computation's live reads. An admission
// referencing 20 objects takes about three round trips instead of one; the
// extra-* annotations hold at most 128 names (stamp.MaxExtraNames each), so
// the most they can cost is 16 round trips.
const DefaultReadsPerCompute = 8

// Computation is the outcome of resolving one workload.
type Computation struct {
	stamp.Result
	// Problems are bad user values found on the way, to be reported and ignored.
	Problems []SubjectProblem
	// Selected are the sources whose rollout selector matches the template labels.
	Selected []stamp.ObjectRef
	// Data is what was read of every referenced source.
	Data map[stamp.ObjectRef]stamp.Source
	// Versions are the resourceVersions read (stamp.VersionAbsent for missing objects).
	Versions map[stamp.ObjectRef]string
	// Refs are the resolved references (template, extra-*, selectors).
	Refs *stamp.Refs
	// Hasher is the key the hash was made with; KeyID identifies it.
	Hasher *stamp.Hasher
	KeyID  string
}

// SubjectProblem is a bad value and the object that carries it.
type SubjectProblem struct {
	// Source is the ConfigMap/Secret carrying the value, or nil when it is the workload.
	Source *stamp.ObjectRef
	stamp.Problem
}

// Record is c's data record on a workload's metadata, the one both the
// webhook and the reconciler write: the applied hash and key id, and the
// sources with their versions only within stamp.MaxRecordBytes (else "" for
// both: remove them), so that configstamp never pushes a workload over the
// API server's limit on annotations.
func (c *Computation) Record() map[string]string {
	out := map[string]string{stamp.AnnotationAppliedHash: c.Hash, stamp.AnnotationKeyID: c.KeyID,
		stamp.AnnotationSources: "", stamp.AnnotationSourceVersions: ""}
	if src, ver, ok := stamp.FormatRecord(c.Sources, c.Versions); ok {
		out[stamp.AnnotationSources], out[stamp.AnnotationSourceVersions] = src, ver
	}
	return out
}

// TooManyReferences is Compute's error for a workload that references more
// than stamp.MaxReferences ConfigMaps and Secrets: nothing was read, and
// configstamp neither stamps nor rolls it (a bad value: warn and admit).
type TooManyReferences struct{ N int }

func (e *TooManyReferences) Error() string {
	return fmt.Sprintf("references %d ConfigMaps and Secrets, more than %d", e.N, stamp.MaxReferences)
}

// Problem is e as a bad value to report.
func (e *TooManyReferences) Problem() stamp.Problem {
	return stamp.Problem{Field: "pod template", Value: fmt.Sprintf("%d references", e.N),
		Message: fmt.Sprintf("references more than %d ConfigMaps and Secrets (template, extra-* and rollout selectors together): configstamp reads none of them and neither stamps nor rolls this workload", stamp.MaxReferences)}
}

// Compute resolves the references of a workload in namespace, with the given
// metadata annotations and pod template, and hashes their data. A pinned
// template counts as referencing the sources of its snapshots (pin.SourceSpec).
func (r *Resolver) Compute(ctx context.Context, namespace string, annotations map[string]string, tmpl *corev1.PodTemplateSpec) (*Computation, error) {
	return r.ComputeFrom(ctx, r.Sources, namespace, annotations, tmpl)
}

// ComputeFrom is Compute reading the sources from sources instead of r.Sources
// (a pin.Memo, that keeps what the hash was computed on).
func (r *Resolver) ComputeFrom(ctx context.Context, sources client.Reader, namespace string, annotations map[string]string, tmpl *corev1.PodTemplateSpec) (*Computation, error) {
	refs, problems := stamp.WorkloadRefs(annotations, pin.SourceSpec(tmpl))
	comp := &Computation{}
	for _, p := range problems {
		comp.Problems = append(comp.Problems, SubjectProblem{Problem: p})
	}
	selected, selProblems, err := r.selectedSources(ctx, namespace, labels.Set(tmpl.Labels))
	if err != nil {
		return nil, err
	}
	comp.Problems = append(comp.Problems, selProblems...)
	for _, ref := range selected {
		refs.AddAll(ref)
	}
	comp.Selected = selected

	objects := refs.Objects()
	if len(objects) > stamp.MaxReferences {
		return nil, &TooManyReferences{N: len(objects)}
	}
	type read struct {
		src     stamp.Source
		version string
		problem *stamp.Problem
		err     error
	}
	reads := make([]read, len(objects))
	if r.Parallel {
		// Live reads are round trips: overlap them, within the bound.
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(cmp.Or(r.MaxReadsPerCompute, DefaultReadsPerCompute), len(objects)) {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < len(objects); i = int(next.Add(1) - 1) {
					if err := ctx.Err(); err != nil { // read nothing more
						reads[i].err = fmt.Errorf("while waiting to read %s: %w", objects[i], err)
						continue
					}
					reads[i].src, reads[i].version, reads[i].problem, reads[i].err = source(ctx, sources, namespace, objects[i])
				}
			})
		}
		wg.Wait()
	} else {
		for i, ref := range objects {
			reads[i].src, reads[i].version, reads[i].problem, reads[i].err = source(ctx, sources, namespace, ref)
		}
	}
	data := make(map[stamp.ObjectRef]stamp.Source, len(objects))
	comp.Versions = make(map[stamp.ObjectRef]string, len(objects))
	for i, ref := range objects {
		if reads[i].err != nil {
			return nil, reads[i].err
		}
		if reads[i].problem != nil {
			comp.Problems = append(comp.Problems, SubjectProblem{Source: &ref, Problem: *reads[i].problem})
		}
		data[ref] = reads[i].src // an ignored source is left out by Compute
		comp.Versions[ref] = reads[i].version
	}
	comp.Data = data
	comp.Refs = refs
	comp.Hasher = r.Keys.Current()
	comp.KeyID = comp.Hasher.KeyID()
	comp.Result = comp.Hasher.Compute(namespace, refs, data)
	return comp, nil
}

// HashedAs reports whether hash is c's data hashed with the current key or
// one it replaced (keys): a stamp made before a key rotation still names the
// same data.
func (c *Computation) HashedAs(keys *stamp.Keyring, namespace, hash string) bool {
	if c.Hash == hash {
		return true
	}
	for _, h := range keys.Hashers() {
		if h.Compute(namespace, c.Refs, c.Data).Hash == hash {
			return true
		}
	}
	return false
}

// source reads one referenced object. A missing object is an absent source.
func source(ctx context.Context, sources client.Reader, namespace string, ref stamp.ObjectRef) (stamp.Source, string, *stamp.Problem, error) {
	key := client.ObjectKey{Namespace: namespace, Name: ref.Name}
	obj := pin.NewSource(ref.Kind)
	if obj == nil {
		return stamp.Source{}, "", nil, fmt.Errorf("unknown source kind %q", ref.Kind)
	}
	if err := sources.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return stamp.AbsentSource(ref), stamp.VersionAbsent, nil, nil
		}
		return stamp.Source{}, "", nil, fmt.Errorf("while reading %s %s: %w", ref.Kind, key, err)
	}
	_, problem := stamp.Ignored(obj.GetAnnotations())
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		return stamp.SourceFromConfigMap(cm), cm.ResourceVersion, problem, nil
	}
	return stamp.SourceFromSecret(obj.(*corev1.Secret)), obj.GetResourceVersion(), problem, nil
}

// selectedSources returns the ConfigMaps and Secrets of namespace whose rollout
// selector matches the pod-template labels. Discovery uses the cache index;
// the data of what matched is then read from r.Sources like any reference.
func (r *Resolver) selectedSources(ctx context.Context, namespace string, podLabels labels.Set) ([]stamp.ObjectRef, []SubjectProblem, error) {
	var out []stamp.ObjectRef
	var problems []SubjectProblem
	add := func(kind stamp.Kind, obj client.Object) {
		sel, ok, problem := stamp.RolloutSelector(obj.GetAnnotations())
		ref := stamp.ObjectRef{Kind: kind, Name: obj.GetName()}
		if problem != nil {
			problems = append(problems, SubjectProblem{Source: &ref, Problem: *problem})
		}
		if ok && !sel.Empty() && sel.Matches(podLabels) {
			out = append(out, ref)
		}
	}
	cms := &corev1.ConfigMapList{}
	if err := r.Index.List(ctx, cms, client.InNamespace(namespace), client.MatchingFields{IndexHasSelector: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("while listing ConfigMaps with selectors in %s: %w", namespace, err)
	}
	for i := range cms.Items {
		add(stamp.KindConfigMap, &cms.Items[i])
	}
	secrets := &corev1.SecretList{}
	if err := r.Index.List(ctx, secrets, client.InNamespace(namespace), client.MatchingFields{IndexHasSelector: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("while listing Secrets with selectors in %s: %w", namespace, err)
	}
	for i := range secrets.Items {
		add(stamp.KindSecret, &secrets.Items[i])
	}
	return out, problems, nil
}
