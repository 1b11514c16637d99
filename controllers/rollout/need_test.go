package rollout

import "testing"

func TestNeedOf(t *testing.T) {
	tests := map[string]struct {
		f    Facts
		want Need
	}{
		"unknown workload: baseline, no rollout":      {Facts{Computed: "v1-a", Key: "k1"}, NeedsRecord},
		"stamped by the webhook, record missing":      {Facts{Stamped: "v1-a", Computed: "v1-a", Key: "k1"}, NeedsRecord},
		"up to date":                                  {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, NeedsNothing},
		"up to date, sources annotation stale":        {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1", Bookkeeping: true}, NeedsRecord},
		"baseline only, data unchanged":               {Facts{Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, NeedsNothing},
		"baseline only, data changed":                 {Facts{Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-b", Key: "k1"}, NeedsRollout},
		"stamped, data changed":                       {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-b", Key: "k1"}, NeedsRollout},
		"stamped while configstamp was down, changed": {Facts{Stamped: "v1-a", Computed: "v1-b", Key: "k1"}, NeedsRollout},
		"record wins over a hand-edited stamp":        {Facts{Stamped: "v1-x", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, NeedsNothing},
		"revert to what the pods were made with":      {Facts{Stamped: "v1-b", Recorded: "v1-b", RecordedKey: "k1", Computed: "v1-a", Key: "k1"}, NeedsRollout},
		// A manifest exported with kubectl get -o yaml carries an old
		// applied-hash; GitOps re-applies it. The template already has the
		// computed stamp: bookkeeping, never a rollout.
		"stale applied-hash re-applied, stamp current": {Facts{Stamped: "v1-b", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-b", Key: "k1"}, NeedsRecord},
		// Records older than key ids: as before, and the key id gets filled in.
		"record without key id, up to date":  {Facts{Stamped: "v1-a", Recorded: "v1-a", Computed: "v1-a", Key: "k1", Bookkeeping: true}, NeedsRecord},
		"record without key id, data change": {Facts{Stamped: "v1-a", Recorded: "v1-a", Computed: "v1-b", Key: "k1"}, NeedsRollout},
		// The installation key changed (lost, restored, rotated).
		"new key, previous key unknown: re-baseline": {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2"}, NeedsRecord},
		"new key, data unchanged under the old key":  {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2", RecordedUnderKey: "v1-a"}, NeedsRecord},
		"new key, data changed under the old key":    {Facts{Stamped: "v1-a", Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2", RecordedUnderKey: "v1-b"}, NeedsRollout},
		"new key, baseline only, unknown old key":    {Facts{Recorded: "v1-a", RecordedKey: "k1", Computed: "v1-z", Key: "k2"}, NeedsRecord},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := NeedOf(tc.f); got != tc.want {
				t.Fatalf("NeedOf(%+v) = %v, want %v", tc.f, got, tc.want)
			}
		})
	}
}
