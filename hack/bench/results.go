package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// results is the one table the benchmark prints, its notes and extra sections.
type results struct {
	rows     []row
	notes    []string
	sections []section
}

// row is one figure; goal and met are set for the figures the performance
// issue sets a goal for (goal).
type row struct {
	Scenario string `json:"scenario"`
	Figure   string `json:"figure"`
	Value    string `json:"value"`
	Goal     string `json:"goal,omitempty"`
	Met      *bool  `json:"met,omitempty"`
}

type section struct{ title, body string }

func (r *results) add(scenario, figure, value string) {
	r.rows = append(r.rows, row{Scenario: scenario, Figure: figure, Value: value})
	logf("%s | %s | %s", scenario, figure, value)
}

// goal adds a figure that has a goal, and whether it is met.
func (r *results) goal(scenario, figure, value, goal string, met bool) {
	r.rows = append(r.rows, row{Scenario: scenario, Figure: figure, Value: value, Goal: goal, Met: &met})
	logf("%s | %s | %s | goal %s: %s", scenario, figure, value, goal, verdict(met))
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}

// json is the table as JSON: the notes and every row, with its goal.
func (r *results) json() ([]byte, error) {
	return json.MarshalIndent(struct {
		Notes []string `json:"notes"`
		Rows  []row    `json:"rows"`
	}{r.notes, r.rows}, "", "  ")
}

// addMemory adds configstamp's peak and current RSS and its heap in use.
func (r *results) addMemory(p *configstampProcess, scenario, when string) error {
	mem, err := p.memory()
	if err != nil {
		return err
	}
	r.add(scenario, "configstamp peak RSS (VmHWM) "+when, fmtBytes(mem.hwm))
	r.add(scenario, "configstamp RSS (VmRSS) "+when, fmt.Sprintf("%s (anon %s, file %s)", fmtBytes(mem.rss), fmtBytes(mem.anon), fmtBytes(mem.file)))
	if inuse, goal, err := p.heap(); err == nil {
		r.add(scenario, "configstamp Go heap in use / GC heap goal "+when, fmtBytes(uint64(inuse))+" / "+fmtBytes(uint64(goal)))
	}
	return nil
}

// addDurations adds p50, p95, p99 and max of ds.
func (r *results) addDurations(scenario, figure string, ds []time.Duration) {
	if len(ds) == 0 {
		r.add(scenario, figure, "no samples")
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	r.add(scenario, figure+" p50 / p95 / p99 / max", fmt.Sprintf("%s / %s / %s / %s (n=%d)",
		fmtDuration(percentile(s, 50)), fmtDuration(percentile(s, 95)), fmtDuration(percentile(s, 99)), fmtDuration(s[len(s)-1]), len(s)))
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

func (r *results) markdown() string {
	var b strings.Builder
	b.WriteString("# configstamp benchmark\n\n")
	for _, n := range r.notes {
		b.WriteString("- " + n + "\n")
	}
	b.WriteString("\n| scenario | figure | value | goal |\n|---|---|---|---|\n")
	for _, row := range r.rows {
		goal := ""
		if row.Met != nil {
			goal = row.Goal + ": " + verdict(*row.Met)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(row.Scenario), cell(row.Figure), cell(row.Value), cell(goal))
	}
	for _, s := range r.sections {
		fmt.Fprintf(&b, "\n## %s\n\n```\n%s\n```\n", s.title, strings.TrimRight(s.body, "\n"))
	}
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func fmtSeconds(s float64) string {
	if math.IsNaN(s) {
		return "n/a"
	}
	return fmtDuration(time.Duration(s * float64(time.Second)))
}

func rate(n int, d time.Duration) string {
	return fmt.Sprintf("%d in %s (%.0f/s)", n, fmtDuration(d), float64(n)/d.Seconds())
}

// fmtDurations formats ds, in order, separated by " / ".
func fmtDurations(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmtDuration(d)
	}
	return strings.Join(out, " / ")
}
