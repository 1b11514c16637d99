package rollout

import (
	"encoding/json"
	"testing"
)

// The stamp goes to the pod template where the kind keeps it.
func TestStampPatch(t *testing.T) {
	for _, tc := range []struct {
		path []string
		want string
	}{
		{[]string{"spec", "template"}, `{"spec":{"template":{"metadata":{"annotations":{"configstamp.io/config-hash":"v1-a"}}}}}`},
		{[]string{"spec", "run", "podTemplate"}, `{"spec":{"run":{"podTemplate":{"metadata":{"annotations":{"configstamp.io/config-hash":"v1-a"}}}}}}`},
	} {
		raw, err := json.Marshal(StampPatch(tc.path, "v1-a"))
		if err != nil || string(raw) != tc.want {
			t.Fatalf("%v: %s (%v), want %s", tc.path, raw, err, tc.want)
		}
	}
}
