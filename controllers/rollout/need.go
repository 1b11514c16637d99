package rollout

// Need is what a workload's data asks for (NeedOf): nothing, its record
// written, or a rollout. Each is the Trigger of the same name (Trigger);
// no other trigger is a need.
type Need int

// The three needs.
const (
	NeedsNothing Need = iota
	NeedsRecord
	NeedsRollout
)

// Trigger is the lifecycle's trigger of n.
func (n Need) Trigger() Trigger {
	return [...]Trigger{NeedNothing, NeedRecord, NeedRollout}[n]
}

func (n Need) String() string { return n.Trigger().String() }

// Facts is what NeedOf weighs: what the workload carries and what the data
// hashes to now.
type Facts struct {
	// Stamped is the template's stamp; Recorded the hash recorded on the
	// workload's metadata (what its pods were made with, or the baseline);
	// RecordedKey the key id recorded with it ("" for records older than key ids).
	Stamped, Recorded, RecordedKey string
	// Computed is the hash of the data now, with the key whose id is Key.
	Computed, Key string
	// RecordedUnderKey is Computed redone with the recorded key, when that key
	// differs from Key and this process still knows it ("" otherwise): it
	// tells whether the data changed since the record, across a key change.
	RecordedUnderKey string
	// Bookkeeping: the record's other annotations (sources, key id) differ
	// from what would be written now.
	Bookkeeping bool
}

// NeedOf applies the no-surprise-rollout rule: what the workload's data
// asks for (the wave's rules, Decide, then say when).
//
//   - The template already carries the computed hash: nothing can roll; at
//     most the record is brought up to date, quietly (a re-applied manifest
//     with a stale applied-hash is bookkeeping, not a rollout).
//   - Nothing known (no stamp, no record): record computed as the baseline and
//     leave the template alone, so installing configstamp restarts nothing.
//   - The record was made with another installation key (lost, restored or
//     rotated): when this process knows that key, roll only if the data
//     changed under it; otherwise re-baseline. A key change never rolls by itself.
//   - The known hash differs from computed: referenced data changed since the
//     pods were made: roll.
//   - Otherwise at most bookkeeping.
func NeedOf(f Facts) Need {
	known := f.Recorded
	if known == "" {
		known = f.Stamped
	}
	keyChanged := f.RecordedKey != "" && f.RecordedKey != f.Key
	switch {
	case f.Stamped == f.Computed:
		if f.Recorded != f.Computed || keyChanged || f.Bookkeeping {
			return NeedsRecord
		}
		return NeedsNothing
	case known == "":
		return NeedsRecord
	case keyChanged && f.RecordedUnderKey == "":
		return NeedsRecord
	case keyChanged && f.RecordedUnderKey == f.Recorded:
		return NeedsRecord
	case keyChanged:
		return NeedsRollout
	case known != f.Computed:
		return NeedsRollout
	case f.Recorded != f.Computed || f.Bookkeeping:
		return NeedsRecord
	}
	return NeedsNothing
}
