package stamp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"slices"
	"strings"
	"unique"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxKeyDigests is the number of keys up to which a ConfigMap or Secret is hashed (and
// cached) key by key. An object with more keys is reduced to one combined digest of
// all its keys and values (Source.Combined): its cached size no longer depends on its
// number of keys, and every reference to it, key-precise or not, hashes that combined
// digest, so the workload rolls on any change of that object (conservative). Objects
// up to the cap hash exactly as they always did. At the cap, the cache holds about
// 28 KiB for such an object with short key names and 90 KiB with 253-byte ones.
const MaxKeyDigests = 256

// Source is the hashable content of one referenced object.
type Source struct {
	Ref     ObjectRef
	Present bool // false: the object does not exist
	// Digests maps key -> Digest(value), over data and binaryData. When Combined, it
	// holds one entry under the key "" (no real key is empty): combinedSum of all
	// keys and values.
	Digests map[string]string
	// Combined: the object has more than MaxKeyDigests keys; Compute hashes the
	// combined digest for every reference to it.
	Combined bool
	// Ignored: the object carries configstamp.io/ignore="true"; Compute leaves it out
	// entirely (no content, no absent marker, no entry in Result.Sources).
	Ignored bool
}

// Digest returns the lowercase hex SHA-256 of value.
func Digest(value []byte) string {
	sum := sha256.Sum256(value)
	return hex.EncodeToString(sum[:])
}

// combinedSum is the SHA-256 over every (key, hex digest of its value) of an
// object, in key order, each field length-prefixed: the combined digest of an
// object beyond MaxKeyDigests keys. keys are the object's distinct keys (sorted
// in place); value returns a key's value. It works key by key, so that the
// digests of an object with 100,000 keys are never all held at once: maps of
// them allocated 40 MB for such a ConfigMap (short keys and values), 1.6 MB now.
func combinedSum(keys []string, value func(string) []byte) [sha256.Size]byte {
	slices.Sort(keys)
	c := NewCombiner()
	for _, k := range keys {
		c.Add(k, value(k))
	}
	return c.Sum()
}

// Combiner computes the combined digest of an object key by key, for a caller
// that reads the keys in order without holding them (controllers/wiredigest):
// Add every distinct key in increasing byte order, then Sum. The result is the
// one an object with those keys and values gets beyond MaxKeyDigests keys.
type Combiner struct {
	h      hash.Hash
	b      bytes.Buffer
	digest [2 * sha256.Size]byte
}

// NewCombiner returns an empty Combiner.
func NewCombiner() *Combiner { return &Combiner{h: sha256.New()} }

// Add adds key with value; keys must come in increasing order, each once.
func (c *Combiner) Add(key string, value []byte) {
	sum := sha256.Sum256(value)
	hex.Encode(c.digest[:], sum[:])
	c.b.Reset()
	writeFields(&c.b, key, unsafe.String(&c.digest[0], len(c.digest))) // copied into b
	c.h.Write(c.b.Bytes())
}

// Sum returns the combined digest of what was added.
func (c *Combiner) Sum() [sha256.Size]byte {
	var sum [sha256.Size]byte
	c.h.Sum(sum[:0])
	return sum
}

// configMapKeys returns cm's distinct keys, data and binaryData (disjoint in
// valid objects), and its value of a key: binaryData's where both have it.
func configMapKeys(cm *corev1.ConfigMap) ([]string, func(string) []byte) {
	keys := make([]string, 0, len(cm.Data)+len(cm.BinaryData))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	for k := range cm.BinaryData {
		if _, dup := cm.Data[k]; !dup {
			keys = append(keys, k)
		}
	}
	return keys, func(k string) []byte {
		if v, ok := cm.BinaryData[k]; ok {
			return v
		}
		return stringBytes(cm.Data[k])
	}
}

// secretKeys is configMapKeys for a Secret's data.
func secretKeys(s *corev1.Secret) ([]string, func(string) []byte) {
	keys := make([]string, 0, len(s.Data))
	for k := range s.Data {
		keys = append(keys, k)
	}
	return keys, func(k string) []byte { return s.Data[k] }
}

// stringBytes returns the bytes of s without copying them, for hashing only: the
// result must never be written. Digesting a 10 KiB value must not allocate 10 KiB.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// AbsentSource is the Source of a referenced object that does not exist.
func AbsentSource(ref ObjectRef) Source { return Source{Ref: ref} }

// digestedForm reports what DigestConfigMap/DigestSecret left in an object: "" for
// an object as the API server delivers it (no object there can carry
// AnnotationDigested, its key fails API validation), digestedPerKey or
// digestedCombined for a cached one.
func digestedForm(annotations map[string]string) string {
	return annotations[AnnotationDigested]
}

// fromCached reads a cached object's digests: raw SHA-256 sums by key.
func fromCached(form string, sums map[string]string) (map[string]string, bool) {
	out := make(map[string]string, len(sums))
	for k, v := range sums {
		out[k] = hex.EncodeToString(stringBytes(v))
	}
	return out, form == DigestedCombined
}

// configMapDigests returns the digests of a ConfigMap, full or digested, and whether
// they are combined. In a digested object Data holds raw SHA-256 sums; a full one
// is read through the same form (cachedDigests), so both give the same digests.
func configMapDigests(cm *corev1.ConfigMap) (map[string]string, bool) {
	sums, form := cm.Data, digestedForm(cm.Annotations)
	if form == "" {
		sums, form = cachedDigests(configMapKeys(cm))
	}
	return fromCached(form, sums)
}

// secretDigests is configMapDigests for Secrets; a digested Secret keeps its sums in
// StringData (see DigestSecret), a full one's StringData (write-only) is ignored.
func secretDigests(s *corev1.Secret) (map[string]string, bool) {
	sums, form := s.StringData, digestedForm(s.Annotations)
	if form == "" {
		sums, form = cachedDigests(secretKeys(s))
	}
	return fromCached(form, sums)
}

// SourceFromConfigMap returns the Source of an existing ConfigMap, full or digested by
// DigestConfigMap; both give identical Sources. A nil cm gives an empty Source.
func SourceFromConfigMap(cm *corev1.ConfigMap) Source {
	if cm == nil {
		return Source{}
	}
	ignored, _ := Ignored(cm.Annotations)
	digests, combined := configMapDigests(cm)
	return Source{Ref: ObjectRef{Kind: KindConfigMap, Name: cm.Name}, Present: true,
		Digests: digests, Combined: combined, Ignored: ignored}
}

// SourceFromSecret returns the Source of an existing Secret, full or digested by
// DigestSecret; both give identical Sources. StringData (write-only) is ignored. A nil
// s gives an empty Source.
func SourceFromSecret(s *corev1.Secret) Source {
	if s == nil {
		return Source{}
	}
	ignored, _ := Ignored(s.Annotations)
	digests, combined := secretDigests(s)
	return Source{Ref: ObjectRef{Kind: KindSecret, Name: s.Name}, Present: true,
		Digests: digests, Combined: combined, Ignored: ignored}
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
	r.keys = append(r.keys, key)
	sum := sha256.Sum256(value)
	r.buf = append(r.buf, sum[:]...)
}

// cached returns the form to cache of an object of at most MaxKeyDigests keys:
// the sums by key, all slices of one string, keys interned (nil when there are
// no keys). A later duplicate key wins, as in a map. (Beyond the cap, see
// cachedDigests.)
func (r *sums) cached() map[string]string {
	if len(r.keys) == 0 {
		return nil
	}
	all := string(r.buf)
	byKey := make(map[string]string, len(r.keys))
	for i, k := range r.keys {
		byKey[unique.Make(k).Value()] = all[i*sha256.Size : (i+1)*sha256.Size]
	}
	return byKey
}

// cachedDigests is the form to cache of an object with keys (distinct) and
// value, and that form's marker: the raw sums by key up to MaxKeyDigests keys,
// beyond the combined sum alone under the key "", its key names not interned (a
// tenant's 100,000 names must not stay in memory).
func cachedDigests(keys []string, value func(string) []byte) (map[string]string, string) {
	if len(keys) > MaxKeyDigests {
		sum := combinedSum(keys, value)
		return combinedCache(sum), DigestedCombined
	}
	r := newSums(len(keys))
	for _, k := range keys {
		r.add(k, value(k))
	}
	return r.cached(), DigestedPerKey
}

// combinedCache is the cache's form of an object beyond MaxKeyDigests keys: its
// combined sum alone, under the key "".
func combinedCache(sum [sha256.Size]byte) map[string]string {
	return map[string]string{"": string(sum[:])}
}

// MaxKeptAnnotation bounds the annotation values the cache keeps (ignore,
// rollout-selector and its alias): a longer value is kept cut to
// MaxKeptAnnotation+1 bytes, which Ignored and RolloutSelector reject exactly as
// they reject the whole value (see MaxSelectorLength).
const MaxKeptAnnotation = MaxSelectorLength

// keptAnnotations are the annotations of a ConfigMap or Secret that the cache keeps.
var keptAnnotations = []string{AnnotationIgnore, AnnotationRolloutSelector, AnnotationPodDeleteMatch}

// cacheMeta strips metadata the cache does not need: the UID, managedFields, labels,
// owner references and every annotation except ignore, rollout-selector and its alias (a
// kubectl last-applied-configuration annotation holds a full copy of the data), those
// cut to MaxKeptAnnotation+1 bytes. It sets the digested marker to form.
func cacheMeta(m *metav1.ObjectMeta, form string) {
	m.Namespace = unique.Make(m.Namespace).Value() // thousands of objects, few namespaces
	m.UID = ""                                     // 48 bytes an object; events read it live
	m.ManagedFields = nil
	m.Labels = nil
	m.OwnerReferences = nil
	var kept map[string]string
	for _, k := range keptAnnotations {
		if v, ok := m.Annotations[k]; ok {
			if kept == nil {
				kept = map[string]string{AnnotationDigested: form}
			}
			if len(v) > MaxKeptAnnotation {
				v = strings.Clone(v[:MaxKeptAnnotation+1]) // not a slice of the whole value
			}
			kept[k] = v
		}
	}
	if kept == nil {
		// Most objects keep nothing but the marker: they all share one map
		// (the cache hands out deep copies, nobody writes the cached object).
		kept = markerOnly[form]
	}
	m.Annotations = kept
}

// markerOnly holds the annotations map of every digested object that keeps no
// other annotation, by form. Never written.
var markerOnly = map[string]map[string]string{
	DigestedPerKey:   {AnnotationDigested: DigestedPerKey},
	DigestedCombined: {AnnotationDigested: DigestedCombined},
}

// DigestConfigMap is the informer-cache transform: in place, Data becomes the raw
// SHA-256 sums of data and binaryData per key, or beyond MaxKeyDigests keys the one
// combined sum under the key "" (SourceFromConfigMap turns either back into the
// digests a full object gives), BinaryData becomes nil, the digested marker is set
// and the metadata is stripped to what configstamp needs (managedFields, labels,
// ownerReferences and all annotations but ignore, rollout-selector and
// podDeleteMatch are dropped). Only the marker, whose key no object from the API
// server can carry, makes an object count as digested. Idempotent; nil is a no-op.
func DigestConfigMap(cm *corev1.ConfigMap) {
	if cm == nil || digestedForm(cm.Annotations) != "" {
		return
	}
	sums, form := cachedDigests(configMapKeys(cm))
	setConfigMapDigests(cm, sums, form)
}

func setConfigMapDigests(cm *corev1.ConfigMap, sums map[string]string, form string) {
	cm.Data = sums
	cm.BinaryData = nil
	cacheMeta(&cm.ObjectMeta, form)
}

// DigestSecret is DigestConfigMap for Secrets. The sums go to StringData and
// Data becomes nil: StringData is write-only in the API, so no Secret read from it
// has any, and a map[string]string costs 64 bytes less than a map[string][]byte
// (32-byte slots instead of 40). SourceFromSecret reads them back. Idempotent; nil is
// a no-op.
func DigestSecret(s *corev1.Secret) {
	if s == nil || digestedForm(s.Annotations) != "" {
		return
	}
	sums, form := cachedDigests(secretKeys(s))
	setSecretDigests(s, sums, form)
}

// Combined makes obj, a ConfigMap or Secret decoded without its data, what
// DigestConfigMap or DigestSecret make of the whole object when it has more
// than MaxKeyDigests keys and their combined digest is sum (see Combiner).
func Combined(obj metav1.Object, sum [sha256.Size]byte) {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		setConfigMapDigests(o, combinedCache(sum), DigestedCombined)
	case *corev1.Secret:
		setSecretDigests(o, combinedCache(sum), DigestedCombined)
	}
}

func setSecretDigests(s *corev1.Secret, sums map[string]string, form string) {
	s.StringData = sums
	s.Data = nil
	s.Type = corev1.SecretType(unique.Make(clipType(string(s.Type))).Value()) // a handful of types
	cacheMeta(&s.ObjectMeta, form)
}

// clipType bounds a Secret type kept in the cache; nothing in configstamp reads it.
func clipType(t string) string {
	if len(t) > 253 {
		return ""
	}
	return t
}
