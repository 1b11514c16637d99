package controllers

// Action is what the reconciler does to one workload.
type Action int

const (
	// Nothing: the workload is up to date.
	Nothing Action = iota
	// Record: write the metadata record only (a baseline, or bookkeeping); no rollout.
	Record
	// Rollout: stamp the template and the record in one patch; exactly one rollout.
	Rollout
)

// Decide applies the no-surprise-rollout rule. stamped is the template's stamp,
// recorded the hash recorded on the workload's metadata (what its pods were made
// with, or the baseline), computed the hash of the data now.
//
//   - Nothing known (no stamp, no record): record computed as the baseline and
//     leave the template alone, so installing configstamp restarts nothing.
//   - The known hash equals computed: at most fill in a missing record.
//   - Otherwise referenced data changed since the pods were made: roll.
func Decide(stamped, recorded, computed string) Action {
	known := recorded
	if known == "" {
		known = stamped
	}
	switch {
	case known == "":
		return Record
	case known != computed:
		return Rollout
	case recorded != computed:
		return Record
	}
	return Nothing
}
