package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/configstamp/configstamp/controllers/rollout"
)

// ringGroup is one source, by kind and name, that a workload of a ringed
// namespace (rollout.LabelRing) is rolling out or is halted on: its copies
// are judged once, ring by ring, and Rings says how each ring stands.
type ringGroup struct {
	Source string      `json:"source"`
	Rings  []ringState `json:"rings"`
}

// ringState counts the workloads of one ring by their last rollout of the
// source (the rollout-cause or the halted change of their record names it).
type ringState struct {
	Ring       int      `json:"ring"`
	Namespaces []string `json:"namespaces"`
	Rolling    int      `json:"rolling"`
	Verifying  int      `json:"verifying"`
	Completed  int      `json:"completed"`
	Halted     int      `json:"halted"`
	// Canary is the ring's running canary of the source,
	// namespace/kind/name (only the lowest ring runs one).
	Canary string `json:"canary,omitempty"`
	// LastStarted is when the ring's latest rollout of the source started.
	LastStarted *time.Time `json:"lastStarted,omitempty"`
}

// ringGroupsOf groups the records of the workloads of ringed namespaces by
// source, for the sources some of them are rolling out or halted on (a
// group whose rollouts are all completed is not in flight: left out). Only
// the namespaces of workloads whose records name a source rolling or halted
// somewhere are read: none when nothing is in flight.
func ringGroupsOf(ctx context.Context, nsl *namespaceLabels, ws []workload) []ringGroup {
	type at struct {
		source string
		ring   int
	}
	open := map[string]bool{} // the sources rolling or halted anywhere
	recs := make([]rollout.Record, len(ws))
	for i, w := range ws {
		rec := rollout.Read(w.meta.Annotations)
		recs[i] = rec
		if rec.Open() || rec.Halted != "" {
			for _, source := range recordSources(rec) {
				open[source] = true
			}
		}
	}
	states, inFlight := map[at]*ringState{}, map[string]bool{}
	for i, w := range ws {
		rec := recs[i]
		sources := slices.DeleteFunc(recordSources(rec), func(source string) bool { return !open[source] })
		if len(sources) == 0 {
			continue
		}
		ring, ok, _ := rollout.RingOf(nsl.get(ctx, w.meta.Namespace))
		if !ok {
			continue
		}
		for _, source := range sources {
			s := states[at{source, ring}]
			if s == nil {
				s = &ringState{Ring: ring, Namespaces: []string{}}
				states[at{source, ring}] = s
			}
			countRecord(s, rec, w)
			inFlight[source] = inFlight[source] || rec.Open() || rec.Halted != ""
		}
	}
	out := []ringGroup{}
	for _, source := range slices.Sorted(maps.Keys(inFlight)) {
		if !inFlight[source] {
			continue
		}
		g := ringGroup{Source: source}
		for key, s := range states {
			if key.source == source {
				slices.Sort(s.Namespaces)
				g.Rings = append(g.Rings, *s)
			}
		}
		slices.SortFunc(g.Rings, func(a, b ringState) int { return a.Ring - b.Ring })
		out = append(out, g)
	}
	return out
}

// recordSources are the sources (Kind/name) a record's cause and halted
// change name, each once.
func recordSources(rec rollout.Record) []string {
	var out []string
	for _, ch := range append(rollout.ParseChanges(rec.Cause), rollout.ParseChanges(rec.Halted)...) {
		if src := ch.Ref.String(); !slices.Contains(out, src) {
			out = append(out, src)
		}
	}
	return out
}

// countRecord adds w, whose record is rec, to its ring's state.
func countRecord(s *ringState, rec rollout.Record, w workload) {
	if !slices.Contains(s.Namespaces, w.meta.Namespace) {
		s.Namespaces = append(s.Namespaces, w.meta.Namespace)
	}
	switch {
	case rec.Halted != "":
		s.Halted++
	case rec.State == rollout.Rolling:
		s.Rolling++
	case rec.State == rollout.Verifying:
		s.Verifying++
	case rec.State == rollout.Completed:
		s.Completed++
	}
	if rec.Open() && rec.Canary == rollout.CanaryRunning {
		s.Canary = w.meta.Namespace + "/" + w.ref()
	}
	if started := utcOrNil(rec.Started); started != nil && (s.LastStarted == nil || started.After(*s.LastStarted)) {
		s.LastStarted = started
	}
}

// printRingGroups prints each group in flight ring by ring.
func (o *options) printRingGroups(groups []ringGroup) {
	for _, g := range groups {
		o.printf("\nRing by ring: %s (judged once, by the lowest ring's canary)\n", g.Source)
		rows := [][]cell{header("RING", "NAMESPACES", "ROLLING", "VERIFYING", "COMPLETED", "HALTED", "LAST STARTED")}
		for _, r := range g.Rings {
			rolling := strconv.Itoa(r.Rolling)
			if r.Canary != "" {
				rolling += " (canary " + r.Canary + ")"
			}
			last := "-"
			if r.LastStarted != nil {
				last = r.LastStarted.Format(time.RFC3339)
			}
			halted := c(strconv.Itoa(r.Halted))
			if r.Halted > 0 {
				halted = coloured(strconv.Itoa(r.Halted), red)
			}
			rows = append(rows, []cell{c(strconv.Itoa(r.Ring)), c(fmt.Sprintf("%d (%s)", len(r.Namespaces), strings.Join(r.Namespaces, ","))),
				c(rolling), c(strconv.Itoa(r.Verifying)), c(strconv.Itoa(r.Completed)), halted, c(last)})
		}
		o.table(rows)
	}
}
