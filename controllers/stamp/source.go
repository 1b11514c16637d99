package stamp

import (
	"crypto/sha256"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Source is the hashable content of one referenced object.
type Source struct {
	Ref     ObjectRef
	Present bool              // false: the object does not exist
	Digests map[string]string // key -> Digest(value), over data and binaryData
	// Ignored: the object carries configstamp.io/ignore="true"; Compute leaves it out
	// entirely (no content, no absent marker, no entry in Result.Sources).
	Ignored bool
}

// Digest returns the lowercase hex SHA-256 of value.
func Digest(value []byte) string {
	sum := sha256.Sum256(value)
	return hex.EncodeToString(sum[:])
}

// AbsentSource is the Source of a referenced object that does not exist.
func AbsentSource(ref ObjectRef) Source { return Source{Ref: ref} }

func isDigested(annotations map[string]string) bool {
	return annotations[AnnotationDigested] == DigestedSHA256
}

// configMapDigests returns the per-key digests of a ConfigMap, full or digested. In a
// digested object Data values are digests already; BinaryData (nil after DigestConfigMap)
// is digested in both cases, so digesting is exactly idempotent.
func configMapDigests(cm *corev1.ConfigMap) map[string]string {
	digested := isDigested(cm.Annotations)
	out := make(map[string]string, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		if digested {
			out[k] = v
		} else {
			out[k] = Digest([]byte(v))
		}
	}
	for k, v := range cm.BinaryData { // keys are disjoint from Data in valid objects
		out[k] = Digest(v)
	}
	return out
}

func secretDigests(s *corev1.Secret) map[string]string {
	digested := isDigested(s.Annotations)
	out := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		if digested {
			out[k] = string(v)
		} else {
			out[k] = Digest(v)
		}
	}
	return out
}

// SourceFromConfigMap returns the Source of an existing ConfigMap, full or digested by
// DigestConfigMap; both give identical Sources. A nil cm gives an empty Source.
func SourceFromConfigMap(cm *corev1.ConfigMap) Source {
	if cm == nil {
		return Source{}
	}
	ignored, _ := Ignored(cm.Annotations)
	return Source{Ref: ObjectRef{Kind: KindConfigMap, Name: cm.Name}, Present: true,
		Digests: configMapDigests(cm), Ignored: ignored}
}

// SourceFromSecret returns the Source of an existing Secret, full or digested by
// DigestSecret; both give identical Sources. StringData (write-only) is ignored. A nil
// s gives an empty Source.
func SourceFromSecret(s *corev1.Secret) Source {
	if s == nil {
		return Source{}
	}
	ignored, _ := Ignored(s.Annotations)
	return Source{Ref: ObjectRef{Kind: KindSecret, Name: s.Name}, Present: true,
		Digests: secretDigests(s), Ignored: ignored}
}

// cacheMeta strips metadata the cache does not need: managedFields, labels, owner
// references and every annotation except ignore, rollout-selector and its alias (a
// kubectl last-applied-configuration annotation holds a full copy of the data). It sets
// the digested marker.
func cacheMeta(m *metav1.ObjectMeta) {
	m.ManagedFields = nil
	m.Labels = nil
	m.OwnerReferences = nil
	var kept map[string]string
	for _, k := range []string{AnnotationIgnore, AnnotationRolloutSelector, AnnotationPodDeleteMatch} {
		if v, ok := m.Annotations[k]; ok {
			if kept == nil {
				kept = map[string]string{AnnotationDigested: DigestedSHA256}
			}
			kept[k] = v
		}
	}
	if kept == nil {
		// Most objects keep nothing but the marker: they all share one map
		// (the cache hands out deep copies, nobody writes the cached object).
		kept = digestedOnly
	}
	m.Annotations = kept
}

// digestedOnly is the annotations map of every digested object that keeps no
// other annotation. Never written.
var digestedOnly = map[string]string{AnnotationDigested: DigestedSHA256}

// DigestConfigMap is the informer-cache transform: in place, Data becomes the per-key
// digests of data and binaryData, BinaryData becomes nil, the digested marker is set and
// the metadata is stripped to what configstamp needs (managedFields, labels,
// ownerReferences and all annotations but ignore, rollout-selector and podDeleteMatch
// are dropped). Idempotent; nil is a no-op.
func DigestConfigMap(cm *corev1.ConfigMap) {
	if cm == nil {
		return
	}
	cm.Data = configMapDigests(cm)
	cm.BinaryData = nil
	cacheMeta(&cm.ObjectMeta)
}

// DigestSecret is DigestConfigMap for Secrets: Data values become their digests,
// StringData is dropped. Idempotent; nil is a no-op.
func DigestSecret(s *corev1.Secret) {
	if s == nil {
		return
	}
	d := secretDigests(s)
	s.Data = make(map[string][]byte, len(d))
	for k, v := range d {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
	cacheMeta(&s.ObjectMeta)
}
