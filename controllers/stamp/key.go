package stamp

import (
	"crypto/hmac"
	"encoding/hex"
	"maps"
	"slices"
	"sync"
)

// AnnotationKeyID (workload metadata) is the KeyID of the installation key
// the recorded hash (AnnotationAppliedHash) was made with.
const AnnotationKeyID = "configstamp.io/key-id"

// Domain separators of the other keyed values configstamp writes.
const (
	domainKeyID   = "configstamp.io/key-id"
	domainContent = "configstamp.io/content"
)

// KeyID identifies the installation key a hash was made with, without
// revealing anything about it or about any data: hex of the first 6 bytes of an
// HMAC of a fixed input under the key.
func (h *Hasher) KeyID() string { return h.id }

// ContentID identifies all of a source's data (every key), or "absent", for
// the rollout records (rollout-cause, halted) and event messages. It is keyed
// like the stamp, so a reader of Deployments and Events cannot test guesses of
// a Secret's value against it.
func (h *Hasher) ContentID(src Source) string {
	if !src.Present {
		return "absent"
	}
	m := h.mac(domainContent)
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(src.Digests)) {
		b = b[:0]
		b = appendFields(b, k, src.Digests[k])
		m.Write(b)
	}
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// Seal is a keyed MAC of fields under domain (hex of 16 bytes): what
// configstamp writes to prove a value is its own (the rollout record), which
// no one without the installation key can forge or move to another object.
func (h *Hasher) Seal(domain string, fields ...string) string {
	m := h.mac(domain)
	m.Write(appendFields(nil, fields...))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

func appendFields(b []byte, fields ...string) []byte {
	for _, f := range fields {
		n := len(f)
		for n >= 0x80 {
			b = append(b, byte(n)|0x80)
			n >>= 7
		}
		b = append(b, byte(n))
		b = append(b, f...)
	}
	return b
}

// Keyring holds the installation key in force and the keys it replaced while
// this process ran, so that a record made with a previous key can still be
// checked (was the data the same?) instead of rolling. Safe for concurrent use.
type Keyring struct {
	mu       sync.RWMutex
	current  *Hasher
	previous []*Hasher // newest first, at most KeepPrevious
}

// KeepPrevious bounds the previous keys kept (in memory, and in the key
// Secret: see hashkey.Watcher). A rollout record or halt sealed with a
// key older than that can no longer be verified and counts for nothing.
const KeepPrevious = 8

// NewKeyring returns a Keyring whose key in force is key.
func NewKeyring(key []byte) *Keyring { return &Keyring{current: NewHasher(key)} }

// Current returns the Hasher of the key in force. A computation uses one
// Hasher throughout, so it never mixes keys.
func (k *Keyring) Current() *Hasher {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.current
}

// Set puts key in force and reports whether it differs from the one in force.
func (k *Keyring) Set(key []byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if hmac.Equal(k.current.key, key) {
		return false
	}
	k.previous = slices.DeleteFunc(k.previous, func(h *Hasher) bool { return hmac.Equal(h.key, key) })
	k.previous = append([]*Hasher{k.current}, k.previous...)
	if len(k.previous) > KeepPrevious {
		k.previous = k.previous[:KeepPrevious]
	}
	k.current = NewHasher(key)
	return true
}

// AddPrevious adds keys (persisted previous keys, oldest last) behind the key
// in force, skipping the one in force and duplicates, within KeepPrevious.
func (k *Keyring) AddPrevious(keys ...[]byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		if len(k.previous) >= KeepPrevious {
			return
		}
		if hmac.Equal(k.current.key, key) || slices.ContainsFunc(k.previous, func(h *Hasher) bool { return hmac.Equal(h.key, key) }) {
			continue
		}
		k.previous = append(k.previous, NewHasher(key))
	}
}

// MergePrevious makes keys (the list the key Secret keeps, newest first) the
// order of the previous keys, followed by the previous keys of this process
// it lacks, without the key in force or duplicates, within KeepPrevious: every
// replica then keeps, and drops, the same keys.
func (k *Keyring) MergePrevious(keys [][]byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*Hasher
	add := func(h *Hasher) {
		if len(out) < KeepPrevious && !hmac.Equal(h.key, k.current.key) &&
			!slices.ContainsFunc(out, func(o *Hasher) bool { return hmac.Equal(o.key, h.key) }) {
			out = append(out, h)
		}
	}
	for _, key := range keys {
		add(NewHasher(key))
	}
	for _, h := range k.previous {
		add(h)
	}
	k.previous = out
}

// Previous returns copies of the previous keys by key id, newest first.
func (k *Keyring) Previous() (ids []string, keys [][]byte) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, h := range k.previous {
		ids, keys = append(ids, h.KeyID()), append(keys, slices.Clone(h.key))
	}
	return ids, keys
}

// Key returns a copy of the key in force.
func (k *Keyring) Key() []byte {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return slices.Clone(k.current.key)
}

// ByID returns the Hasher, in force or previous, whose KeyID is id, or nil.
func (k *Keyring) ByID(id string) *Hasher {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, h := range append([]*Hasher{k.current}, k.previous...) {
		if h.KeyID() == id {
			return h
		}
	}
	return nil
}

// Hashers returns the Hasher in force, then the previous ones, newest first.
func (k *Keyring) Hashers() []*Hasher {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return append([]*Hasher{k.current}, k.previous...)
}
