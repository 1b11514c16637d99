package stamp

import (
	"crypto/sha256"
	"encoding/hex"
	"unique"
	"unsafe"

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

// stringBytes returns the bytes of s without copying them, for hashing only: the
// result must never be written. Digesting a 10 KiB value must not allocate 10 KiB.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// AbsentSource is the Source of a referenced object that does not exist.
func AbsentSource(ref ObjectRef) Source { return Source{Ref: ref} }

func isDigested(annotations map[string]string) bool {
	return annotations[AnnotationDigested] == DigestedSHA256
}

// configMapDigests returns the per-key hex digests of a ConfigMap, full or digested.
// In a digested object Data values are raw SHA-256 sums; BinaryData (nil after
// DigestConfigMap) is digested in both cases, so digesting is exactly idempotent.
func configMapDigests(cm *corev1.ConfigMap) map[string]string {
	digested := isDigested(cm.Annotations)
	out := make(map[string]string, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		if digested {
			out[k] = hex.EncodeToString(stringBytes(v))
		} else {
			out[k] = Digest(stringBytes(v))
		}
	}
	for k, v := range cm.BinaryData { // keys are disjoint from Data in valid objects
		out[k] = Digest(v)
	}
	return out
}

func secretDigests(s *corev1.Secret) map[string]string {
	digested := isDigested(s.Annotations)
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		if digested {
			out[k] = hex.EncodeToString(v)
		} else {
			out[k] = Digest(v)
		}
	}
	if digested { // DigestSecret keeps the sums in StringData; see there
		for k, v := range s.StringData {
			out[k] = hex.EncodeToString(stringBytes(v))
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

// sums is the cache's form of an object's values: the raw SHA-256 sums of every key's
// value, back to back in one allocation (32 bytes a key, where a hex string would take
// 64 and an allocation of its own). Keys are interned: the same key names recur across
// thousands of objects.
type sums struct {
	keys []string
	buf  []byte
}

func newSums(n int) *sums {
	return &sums{keys: make([]string, 0, n), buf: make([]byte, 0, n*sha256.Size)}
}

func (r *sums) add(key string, value []byte) {
	r.keys = append(r.keys, unique.Make(key).Value())
	sum := sha256.Sum256(value)
	r.buf = append(r.buf, sum[:]...)
}

// byKey returns the sums by key, all slices of one string; nil when there are no keys.
func (r *sums) byKey() map[string]string {
	if len(r.keys) == 0 {
		return nil
	}
	all := string(r.buf)
	out := make(map[string]string, len(r.keys))
	for i, k := range r.keys {
		out[k] = all[i*sha256.Size : (i+1)*sha256.Size]
	}
	return out
}

// cacheMeta strips metadata the cache does not need: the UID, managedFields, labels,
// owner references and every annotation except ignore, rollout-selector and its alias (a
// kubectl last-applied-configuration annotation holds a full copy of the data). It sets
// the digested marker.
func cacheMeta(m *metav1.ObjectMeta) {
	m.Namespace = unique.Make(m.Namespace).Value() // thousands of objects, few namespaces
	m.UID = ""                                     // 48 bytes an object; events read it live
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

// DigestConfigMap is the informer-cache transform: in place, Data becomes the raw
// SHA-256 sums of data and binaryData per key (SourceFromConfigMap turns them back into
// the same hex digests a full object gives), BinaryData becomes nil, the digested
// marker is set and the metadata is stripped to what configstamp needs (managedFields,
// labels, ownerReferences and all annotations but ignore, rollout-selector and
// podDeleteMatch are dropped). Idempotent; nil is a no-op.
func DigestConfigMap(cm *corev1.ConfigMap) {
	if cm == nil {
		return
	}
	if isDigested(cm.Annotations) {
		// Data holds sums already (or, with a user-set marker, what configMapDigests
		// treats as sums); only BinaryData is left to digest.
		for k, v := range cm.BinaryData {
			if cm.Data == nil {
				cm.Data = make(map[string]string, len(cm.BinaryData))
			}
			sum := sha256.Sum256(v)
			cm.Data[k] = string(sum[:])
		}
	} else {
		r := newSums(len(cm.Data) + len(cm.BinaryData))
		for k, v := range cm.Data {
			r.add(k, stringBytes(v))
		}
		for k, v := range cm.BinaryData {
			r.add(k, v)
		}
		cm.Data = r.byKey()
	}
	cm.BinaryData = nil
	cacheMeta(&cm.ObjectMeta)
}

// DigestSecret is DigestConfigMap for Secrets. The raw sums go to StringData and
// Data becomes nil: StringData is write-only in the API, so no Secret read from it
// has any, and a map[string]string costs 64 bytes less than a map[string][]byte
// (32-byte slots instead of 40). SourceFromSecret reads them back. Idempotent; nil is
// a no-op.
func DigestSecret(s *corev1.Secret) {
	if s == nil {
		return
	}
	if isDigested(s.Annotations) {
		// Data holds what secretDigests treats as sums already (a user-set marker).
		for k, v := range s.Data {
			if s.StringData == nil {
				s.StringData = make(map[string]string, len(s.Data))
			}
			s.StringData[k] = string(v)
		}
	} else {
		r := newSums(len(s.Data))
		for k, v := range s.Data {
			r.add(k, v)
		}
		s.StringData = r.byKey()
	}
	s.Data = nil
	s.Type = corev1.SecretType(unique.Make(string(s.Type)).Value()) // a handful of types
	cacheMeta(&s.ObjectMeta)
}
