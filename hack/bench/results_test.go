package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestGoalsInBothTables: a figure with a goal shows the goal and whether it
// is met in the markdown table and in the JSON one; a figure without a goal
// has neither.
func TestGoalsInBothTables(t *testing.T) {
	r := &results{}
	r.add("setup", "start to /readyz", "1.2 s")
	r.goal("fan-out", "all templates restamped / the floor", "2.48x", "<= 1.2x", false)
	r.goal("memory", "configstamp peak RSS after sync / the floor's peak RSS", "57.1 MiB / 48.4 MiB = 1.18x", "<= 1.2x", true)

	md := r.markdown()
	for _, want := range []string{"| scenario | figure | value | goal |", "| 2.48x | <= 1.2x: NOT met |", "| 57.1 MiB / 48.4 MiB = 1.18x | <= 1.2x: met |", "| 1.2 s |  |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown table lacks %q:\n%s", want, md)
		}
	}
	raw, err := r.json()
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Rows []struct {
			Figure, Value, Goal string
			Met                 *bool
		}
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 3 || table.Rows[0].Met != nil || table.Rows[0].Goal != "" ||
		table.Rows[1].Met == nil || *table.Rows[1].Met || table.Rows[2].Met == nil || !*table.Rows[2].Met {
		t.Fatalf("JSON rows %s", raw)
	}
}
