package rollout

import "testing"

func TestNeedOf(t *testing.T) {
	tests := map[string]struct {
		f    Facts
		want Trigger
	}{
		"unknown workload: baseline, no rollout":      {Facts{Computed: "v1-a", Key: "k1"}, NeedRecord},
		"stamped by the webhook, record missing":      {Facts{Stamped: "v1-a", Computed: "v1-a", Key: "k1"}, NeedRecord},
		"up to date":                                  {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, NeedNothing},
		"up to date, sources annotation stale":        {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1", Bookkeeping: true}, NeedRecord},
		"baseline only, data unchanged":               {Facts{Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, NeedNothing},
		"baseline only, data changed":                 {Facts{Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-b", Key: "k1"}, NeedRollout},
		"stamped, data changed":                       {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-b", Key: "k1"}, NeedRollout},
		"stamped while configstamp was down, changed": {Facts{Stamped: "v1-a", Computed: "v1-b", Key: "k1"}, NeedRollout},
		"record wins over a hand-edited stamp":        {Facts{Stamped: "v1-x", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, NeedNothing},
		"revert to what the pods were made with":      {Facts{Stamped: "v1-b", Recorded: "v1-b", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, NeedRollout},
		// A manifest exported with kubectl get -o yaml carries an old
		// applied-hash; GitOps re-applies it. The template already has the
		// computed stamp: bookkeeping, never a rollout.
		"stale applied-hash re-applied, stamp current": {Facts{Stamped: "v1-b", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-b", Key: "k1"}, NeedRecord},
		// Records older than key ids: as before, and the key id gets filled in.
		"record without key id, up to date":  {Facts{Stamped: "v1-a", Recorded: "v1-a", Computed: "v1-a", Key: "k1", Bookkeeping: true}, NeedRecord},
		"record without key id, data change": {Facts{Stamped: "v1-a", Recorded: "v1-a", Computed: "v1-b", Key: "k1"}, NeedRollout},
		// The installation key changed (lost, restored, rotated).
		"new key, previous key unknown: re-baseline": {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2"}, NeedRecord},
		"new key, data unchanged under the old key":  {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2", RecordedUnderKey: "v1-a"}, NeedRecord},
		"new key, data changed under the old key":    {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2", RecordedUnderKey: "v1-b"}, NeedRollout},
		"new key, baseline only, unknown old key":    {Facts{Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2"}, NeedRecord},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := NeedOf(tc.f); got != tc.want {
				t.Fatalf("NeedOf(%+v) = %v, want %v", tc.f, got, tc.want)
			}
		})
	}
}
