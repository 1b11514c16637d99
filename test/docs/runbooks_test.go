package docs

import (
	"regexp"
	"strings"
	"testing"
)

var (
	// An alert of config/prometheus/rules.yaml, and its runbook_url.
	alertRE   = regexp.MustCompile(`(?m)^\s+- alert: (\S+)\s*$`)
	runbookRE = regexp.MustCompile(`(?m)^\s+runbook_url: (\S+)\s*$`)
)

// runbookBase is where every alert's runbook_url points: docs/operations.md on
// GitHub, at the alert's section.
const runbookBase = "https://github.com/configstamp/configstamp/blob/main/docs/operations.md#"

// TestRunbooks: every alert of config/prometheus/rules.yaml has a runbook_url,
// the section of docs/operations.md named after the alert, and that section
// says what the alert means, how to find the cause and how to resolve it.
func TestRunbooks(t *testing.T) {
	root := repoRoot(t)
	rules := readFile(t, root, "config/prometheus/rules.yaml")
	ops := readFile(t, root, "docs/operations.md")
	anchors := headingAnchors(ops)
	sections := sectionsByAnchor(ops)

	alerts := alertRE.FindAllStringSubmatchIndex(rules, -1)
	if len(alerts) == 0 {
		t.Fatal("config/prometheus/rules.yaml has no alert")
	}
	for i, a := range alerts {
		name := rules[a[2]:a[3]]
		end := len(rules)
		if i+1 < len(alerts) {
			end = alerts[i+1][0]
		}
		urls := runbookRE.FindAllStringSubmatch(rules[a[1]:end], -1)
		if len(urls) != 1 {
			t.Errorf("alert %s: %d runbook_url annotations, want 1", name, len(urls))
			continue
		}
		want := runbookBase + strings.ToLower(name)
		if urls[0][1] != want {
			t.Errorf("alert %s: runbook_url %s, want %s", name, urls[0][1], want)
			continue
		}
		fragment := strings.TrimPrefix(want, runbookBase)
		if !anchors[fragment] {
			t.Errorf("alert %s: docs/operations.md has no heading for #%s", name, fragment)
			continue
		}
		body := sections[fragment]
		for _, part := range []string{"**Means**", "**Find the cause**", "**Resolve**"} {
			if !strings.Contains(body, part) {
				t.Errorf("docs/operations.md#%s: the runbook lacks %s", fragment, part)
			}
		}
	}
}

// sectionsByAnchor returns the text under each heading of a Markdown text
// (up to the next heading of any level), by the heading's anchor.
func sectionsByAnchor(text string) map[string]string {
	out := map[string]string{}
	current := ""
	var fence bool
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
		}
		if !fence {
			if m := atxRE.FindStringSubmatch(l); m != nil {
				current = anchor(m[2])
				continue
			}
		}
		if current != "" {
			out[current] += l + "\n"
		}
	}
	return out
}
