package stamp

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"maps"
	"slices"
	"strings"
)

// Hasher computes the stamp: HMAC-SHA256 with a per-installation key, so the hash is no
// oracle for guessing low-entropy Secret values. It is safe for concurrent use.
type Hasher struct {
	key []byte
	id  string // KeyID, computed once: ByID compares it for every record it verifies
}

// NewHasher returns a Hasher for key (copied).
func NewHasher(key []byte) *Hasher {
	h := &Hasher{key: bytes.Clone(key)}
	h.id = hex.EncodeToString(h.mac(domainKeyID).Sum(nil)[:6])
	return h
}

// Result is the outcome of Compute.
type Result struct {
	// Hash is the stamp: HashVersion + "-" + hex of the first 16 bytes of the HMAC.
	Hash string
	// Sources holds, per referenced (not ignored) object, a short digest: hex of the
	// first 6 bytes of an HMAC over that object's records only.
	Sources map[ObjectRef]string
}

// Record tags of the canonical input.
const (
	recKey          = "key"           // a referenced key and the digest of its value
	recKeyAbsent    = "key-absent"    // a referenced key missing from a present object
	recAbsent       = "absent"        // a referenced object that does not exist
	recPresentEmpty = "present-empty" // a present object referenced with All that has no keys
	recCombined     = "combined"      // a present object with more than MaxKeyDigests keys
)

// Domain separators: the full hash and the per-source digests never share an input.
const (
	domainHash   = "configstamp.io/config-hash"
	domainSource = "configstamp.io/source"
)

// writeFields appends each field length-prefixed (uvarint), so no two field lists
// encode to the same bytes.
func writeFields(b *bytes.Buffer, fields ...string) {
	var n [binary.MaxVarintLen64]byte
	for _, f := range fields {
		b.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
		b.WriteString(f)
	}
}

func (h *Hasher) mac(domain string) hash.Hash {
	m := hmac.New(sha256.New, h.key)
	var b bytes.Buffer
	writeFields(&b, domain, HashVersion)
	m.Write(b.Bytes())
	return m
}

// Compute returns the hash of the referenced data of a workload in namespace.
//
// The canonical input is, for every referenced object in Kind/Name order, its records
// in key order: (key, kind, namespace, name, key, digest) for each referenced key that
// exists; (key-absent, kind, namespace, name, key) for a referenced key the object
// lacks; (absent, kind, namespace, name) for an object missing from sources or not
// Present; (present-empty, kind, namespace, name) for a present object referenced with
// All that has no keys; (combined, kind, namespace, name, combined digest) for a
// present object with more than MaxKeyDigests keys, however it is referenced (a
// change of any of its keys then changes the hash). Fields are length-prefixed. Only referenced keys count; objects
// whose Source is Ignored contribute nothing. Map iteration order never matters.
func (h *Hasher) Compute(namespace string, refs *Refs, sources map[ObjectRef]Source) Result {
	full := h.mac(domainHash)
	res := Result{Sources: map[ObjectRef]string{}}
	var b bytes.Buffer
	for _, ref := range refs.Objects() {
		src, found := sources[ref]
		if found && src.Ignored {
			continue
		}
		b.Reset()
		kind, name := string(ref.Kind), ref.Name
		switch ks := refs.m[ref]; {
		case !found || !src.Present:
			writeFields(&b, recAbsent, kind, namespace, name)
		case src.Combined:
			writeFields(&b, recCombined, kind, namespace, name, src.Digests[""])
		case ks.All && len(src.Digests) == 0:
			writeFields(&b, recPresentEmpty, kind, namespace, name)
		default:
			keys := ks.Sorted()
			if ks.All {
				keys = slices.Sorted(maps.Keys(src.Digests))
			}
			for _, k := range keys {
				if d, ok := src.Digests[k]; ok {
					writeFields(&b, recKey, kind, namespace, name, k, d)
				} else {
					writeFields(&b, recKeyAbsent, kind, namespace, name, k)
				}
			}
		}
		full.Write(b.Bytes())
		one := h.mac(domainSource)
		one.Write(b.Bytes())
		res.Sources[ref] = hex.EncodeToString(one.Sum(nil)[:6])
	}
	res.Hash = HashVersion + "-" + hex.EncodeToString(full.Sum(nil)[:16])
	return res
}

// FormatSources renders short digests for AnnotationSources:
// "ConfigMap/a=0123abcd4567,Secret/b=89ab...", sorted by kind, then name. Bytes of a
// name that cannot occur in an object name (%, comma, =, space, control and non-ASCII
// bytes) are %XX-escaped so that ParseSources is its exact inverse.
func FormatSources(m map[ObjectRef]string) string {
	refs := make([]ObjectRef, 0, len(m))
	for ref := range m {
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, compareRefs)
	var b strings.Builder
	for i, ref := range refs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(string(ref.Kind))
		b.WriteByte('/')
		b.WriteString(escapeName(ref.Name))
		b.WriteByte('=')
		b.WriteString(m[ref])
	}
	return b.String()
}

// ParseSources parses AnnotationSources. It is tolerant: items that are not
// "Kind/name=hexdigest" with a known kind, a non-empty name and a non-empty lowercase
// hex digest are skipped; spaces around items are trimmed; a later duplicate wins.
// The result is never nil.
func ParseSources(s string) map[ObjectRef]string {
	out := map[ObjectRef]string{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		i := strings.LastIndexByte(item, '=')
		if i < 0 || !isLowerHex(item[i+1:]) {
			continue
		}
		ref, err := ParseObjectRef(item[:i])
		if err != nil {
			continue
		}
		if ref.Name, err = unescapeName(ref.Name); err != nil || ref.Name == "" {
			continue
		}
		out[ref] = item[i+1:]
	}
	return out
}

// Changed returns the objects whose short digest differs between old and new, objects
// present in only one of them included, sorted by kind, then name.
func Changed(old, new map[ObjectRef]string) []ObjectRef {
	var out []ObjectRef
	for ref, d := range old {
		if nd, ok := new[ref]; !ok || nd != d {
			out = append(out, ref)
		}
	}
	for ref := range new {
		if _, ok := old[ref]; !ok {
			out = append(out, ref)
		}
	}
	slices.SortFunc(out, compareRefs)
	return out
}

func isLowerHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func mustEscape(c byte) bool {
	return c <= ' ' || c >= 0x7f || c == '%' || c == ',' || c == '='
}

func escapeName(s string) string {
	const hexdigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; mustEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexdigits[c>>4])
			b.WriteByte(hexdigits[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// unescapeName reverses escapeName; it rejects malformed escapes, escapes of bytes that
// need none, and raw bytes that escapeName would have escaped.
func unescapeName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if mustEscape(c) {
				return "", errBadEscape
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", errBadEscape
		}
		v, err := hex.DecodeString(s[i+1 : i+3])
		if err != nil || !mustEscape(v[0]) {
			return "", errBadEscape
		}
		b.WriteByte(v[0])
		i += 2
	}
	return b.String(), nil
}

var errBadEscape = errors.New("bad %-escape in name")
