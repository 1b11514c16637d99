package controllers

import (
	"encoding/json"
	"testing"
)

func TestDecide(t *testing.T) {
	tests := map[string]struct {
		f    Facts
		want Action
	}{
		"unknown workload: baseline, no rollout":      {Facts{Computed: "v1-a", Key: "k1"}, Record},
		"stamped by the webhook, record missing":      {Facts{Stamped: "v1-a", Computed: "v1-a", Key: "k1"}, Record},
		"up to date":                                  {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, Nothing},
		"up to date, sources annotation stale":        {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1", Bookkeeping: true}, Record},
		"baseline only, data unchanged":               {Facts{Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, Nothing},
		"baseline only, data changed":                 {Facts{Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-b", Key: "k1"}, Rollout},
		"stamped, data changed":                       {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-b", Key: "k1"}, Rollout},
		"stamped while configstamp was down, changed": {Facts{Stamped: "v1-a", Computed: "v1-b", Key: "k1"}, Rollout},
		"record wins over a hand-edited stamp":        {Facts{Stamped: "v1-x", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, Nothing},
		"revert to what the pods were made with":      {Facts{Stamped: "v1-b", Recorded: "v1-b", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, Rollout},
		// A manifest exported with kubectl get -o yaml carries an old
		// applied-hash; GitOps re-applies it. The template already has the
		// computed stamp: bookkeeping, never a rollout.
		"stale applied-hash re-applied, stamp current": {Facts{Stamped: "v1-b", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-b", Key: "k1"}, Record},
		// Records older than key ids: as before, and the key id gets filled in.
		"record without key id, up to date":  {Facts{Stamped: "v1-a", Recorded: "v1-a", Computed: "v1-a", Key: "k1", Bookkeeping: true}, Record},
		"record without key id, data change": {Facts{Stamped: "v1-a", Recorded: "v1-a", Computed: "v1-b", Key: "k1"}, Rollout},
		// The installation key changed (lost, restored, rotated).
		"new key, previous key unknown: re-baseline": {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2"}, Record},
		"new key, data unchanged under the old key":  {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2", RecordedUnderKey: "v1-a"}, Record},
		"new key, data changed under the old key":    {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2", RecordedUnderKey: "v1-b"}, Rollout},
		"new key, baseline only, unknown old key":    {Facts{Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2"}, Record},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Decide(tc.f); got != tc.want {
				t.Fatalf("Decide(%+v) = %v, want %v", tc.f, got, tc.want)
			}
		})
	}
}

// The stamp goes to the pod template where the kind keeps it.
func TestStampPatch(t *testing.T) {
	for _, tc := range []struct {
		path []string
		want string
	}{
		{[]string{"spec", "template"}, `{"spec":{"template":{"metadata":{"annotations":{"configstamp.io/config-hash":"v1-a"}}}}}`},
		{[]string{"spec", "run", "podTemplate"}, `{"spec":{"run":{"podTemplate":{"metadata":{"annotations":{"configstamp.io/config-hash":"v1-a"}}}}}}`},
	} {
		raw, err := json.Marshal(stampPatch(tc.path, "v1-a"))
		if err != nil || string(raw) != tc.want {
			t.Fatalf("%v: %s (%v), want %s", tc.path, raw, err, tc.want)
		}
	}
}
