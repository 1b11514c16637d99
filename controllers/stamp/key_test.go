package stamp

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
)

// keyN is a distinct 32-byte test key.
func keyN(n int) []byte { return fmt.Appendf(nil, "test-key-%023d", n) }

func keyIDs(keys ...[]byte) []string {
	var out []string
	for _, k := range keys {
		out = append(out, NewHasher(k).KeyID())
	}
	return out
}

// Previous keys persisted in the key Secret are added behind the key in
// force, in order, once each, never the key in force itself, and at most
// KeepPrevious of them.
func TestKeyringAddPrevious(t *testing.T) {
	current := keyN(0)
	many := make([][]byte, 0, 12)
	for i := 1; i <= 12; i++ {
		many = append(many, keyN(i))
	}
	tests := map[string]struct {
		setFirst [][]byte // Set in this order before AddPrevious
		add      [][]byte
		want     [][]byte
	}{
		"none":                        {add: nil, want: nil},
		"kept in order":               {add: [][]byte{keyN(1), keyN(2), keyN(3)}, want: [][]byte{keyN(1), keyN(2), keyN(3)}},
		"duplicates once":             {add: [][]byte{keyN(1), keyN(2), keyN(1), keyN(2)}, want: [][]byte{keyN(1), keyN(2)}},
		"the key in force skipped":    {add: [][]byte{current, keyN(1), current}, want: [][]byte{keyN(1)}},
		"bounded to KeepPrevious (8)": {add: many, want: many[:8]},
		"behind the keys replaced while running": {
			setFirst: [][]byte{keyN(5)}, // keyN(0) replaced: previous, keyN(5) in force
			add:      [][]byte{keyN(1), keyN(0), keyN(5), keyN(2)},
			want:     [][]byte{keyN(0), keyN(1), keyN(2)}},
		"nothing added once full": {
			setFirst: many[:9],
			add:      [][]byte{keyN(99)},
			want:     [][]byte{many[7], many[6], many[5], many[4], many[3], many[2], many[1], many[0]}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			k := NewKeyring(current)
			for _, key := range tc.setFirst {
				k.Set(key)
			}
			k.AddPrevious(tc.add...)
			ids, keys := k.Previous()
			if want := keyIDs(tc.want...); !slices.Equal(ids, want) {
				t.Fatalf("previous key ids %v, want %v", ids, want)
			}
			if !slices.EqualFunc(keys, tc.want, slices.Equal) {
				t.Fatalf("previous keys %q, want %q", keys, tc.want)
			}
			for _, key := range tc.want {
				if h := k.ByID(NewHasher(key).KeyID()); h == nil {
					t.Fatalf("previous key %q not found by its id", key)
				}
			}
		})
	}
}

// Previous hands out copies: the caller cannot change the keys kept.
func TestKeyringPreviousReturnsCopies(t *testing.T) {
	k := NewKeyring(keyN(0))
	k.AddPrevious(keyN(1))
	_, keys := k.Previous()
	keys[0][0] ^= 0xff
	if _, again := k.Previous(); !slices.Equal(again[0], keyN(1)) {
		t.Fatalf("changing the returned key changed the kept one: %q", again[0])
	}
	if k.ByID(NewHasher(keyN(1)).KeyID()) == nil {
		t.Fatal("the previous key is no longer found by its id")
	}
}

// Set keeps at most KeepPrevious replaced keys, newest first.
func TestKeyringSetBound(t *testing.T) {
	k := NewKeyring(keyN(0))
	for i := 1; i <= 10; i++ {
		k.Set(keyN(i))
	}
	ids, _ := k.Previous()
	if want := keyIDs(keyN(9), keyN(8), keyN(7), keyN(6), keyN(5), keyN(4), keyN(3), keyN(2)); !slices.Equal(ids, want) {
		t.Fatalf("previous key ids %v, want the 8 newest replaced, newest first %v", ids, want)
	}
}

// Seal is keyed, separated by domain, and unambiguous about where one field
// ends and the next begins.
func TestSeal(t *testing.T) {
	h := NewHasher(testKey)
	s := h.Seal("d", "ab", "c")
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(s) {
		t.Fatalf("seal %q: want hex of 16 bytes", s)
	}
	if h.Seal("d", "ab", "c") != s {
		t.Fatal("seal not deterministic")
	}
	for name, other := range map[string]string{
		"fields shifted": h.Seal("d", "a", "bc"),
		"fields joined":  h.Seal("d", "abc"),
		"field added":    h.Seal("d", "ab", "c", ""),
		"other domain":   h.Seal("e", "ab", "c"),
		"other key":      NewHasher(keyN(1)).Seal("d", "ab", "c"),
	} {
		if other == s {
			t.Errorf("%s: same seal %q", name, s)
		}
	}
}
