// Package docs checks the Markdown documentation of the repository: every
// relative link in README.md, the other top-level *.md (CONTRIBUTING.md,
// SECURITY.md, CHANGELOG.md), docs/*.md and .github's templates resolves to a file inside the
// repository (a user's clone), every #fragment names a heading of the page it
// points at, and README.md stays short. Standard library only, no cluster.
package docs

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// maxReadmeLines is the length README.md may not exceed; the rest lives in docs/.
const maxReadmeLines = 250

// TestLinks checks every link of the files markdownFiles lists.
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	c := newChecker(root)
	for _, f := range files {
		for _, problem := range c.checkFile(f) {
			t.Error(problem)
		}
	}
}

// TestReadmeLength keeps README.md an overview: at most maxReadmeLines lines.
func TestReadmeLength(t *testing.T) {
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatalf("reading README.md: %v", err)
	}
	if n := countLines(string(data)); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, at most %d allowed: move sections into docs/ and link them", n, maxReadmeLines)
	}
}

// TestChecker runs the checker on a small repository made in a temporary
// directory, so that a checker that accepts everything cannot pass TestLinks.
func TestChecker(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(filepath.Dir(root), "shared")
	write(t, filepath.Join(root, "go.mod"), "module example\n")
	write(t, filepath.Join(root, ".gitignore"), "/bin/\n*.test\n")
	write(t, filepath.Join(root, "bin", "tool"), "built\n")
	write(t, filepath.Join(root, "config", "a.yaml"), "a: 1\n")
	write(t, filepath.Join(root, "docs", "page.md"), "# Page\n\n## Rollout safety (`--x`, off)\n\nSee [back](../README.md#title).\n")
	write(t, filepath.Join(root, "README.md"), strings.Join([]string{
		"# Title",
		"",
		"## The two commands",
		"",
		"[ok](docs/page.md) [ok](docs/page.md#rollout-safety---x-off) [ok](#the-two-commands)",
		"[ok](config/a.yaml) [ok](config/) [ok](https://example.com/x) [ok](mailto:a@b.c) [ok][ref]",
		"![ok](config/a.yaml \"title\")",
		"`[not a link](nowhere.md)`",
		"```sh",
		"[not a link](nowhere.md)",
		"# not a heading",
		"```",
		"[bad1](../shared/design.md)",
		"[bad2](docs/missing.md)",
		"[bad3](#not-a-heading)",
		"[bad4](docs/page.md#nope)",
		"[bad5 over",
		"two lines](nowhere/)",
		"[bad6](bin/tool)",
		"[bad7][broken]",
		"[bad8](/../outside.md)",
		"",
		"[ref]: docs/page.md#page",
		"[broken]: docs/gone.md",
		"",
	}, "\n"))
	write(t, filepath.Join(outside, "design.md"), "# Exists, but not in a clone\n")

	problems := newChecker(root).checkFile(filepath.Join(root, "README.md"))
	problems = append(problems, newChecker(root).checkFile(filepath.Join(root, "docs", "page.md"))...)
	want := map[string]string{
		"bad1": "README.md:13: link ../shared/design.md",
		"bad2": "README.md:14: link docs/missing.md",
		"bad3": "README.md:15: link #not-a-heading",
		"bad4": "README.md:16: link docs/page.md#nope",
		"bad5": "README.md:18: link nowhere/",
		"bad6": "README.md:19: link bin/tool",
		"bad7": "README.md:24: link docs/gone.md",
		"bad8": "README.md:21: link /../outside.md",
	}
	if len(problems) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(problems), len(want), strings.Join(problems, "\n"))
	}
	for name, prefix := range want {
		found := false
		for _, p := range problems {
			if strings.HasPrefix(p, prefix+":") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no problem starting with %q in:\n%s", name, prefix, strings.Join(problems, "\n"))
		}
	}
}

func TestAnchor(t *testing.T) {
	tests := map[string]string{
		"The two commands": "the-two-commands",
		"Apply-time warnings (`--apply-warnings`, off by default)": "apply-time-warnings---apply-warnings-off-by-default",
		"Metrics, HTTP/2 and network policy":                       "metrics-http2-and-network-policy",
		"When a rollout is complete, and when it has failed":       "when-a-rollout-is-complete-and-when-it-has-failed",
		"kubectl configstamp":                                      "kubectl-configstamp",
		"Faults: exactly once, measured":                           "faults-exactly-once-measured",
		"Snake_case and [a link](x.md) **bold**":                   "snake_case-and-a-link-bold",
	}
	for heading, want := range tests {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// repoRoot walks up from the working directory to the directory holding go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// markdownFiles lists README.md, the other Markdown files at the top
// (CONTRIBUTING.md, SECURITY.md, CHANGELOG.md, ...), docs/*.md and GitHub's
// (.github/*.md, .github/ISSUE_TEMPLATE/*.md). The files people look for must
// exist.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for _, name := range []string{"README.md", "CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md",
		".github/pull_request_template.md", ".github/ISSUE_TEMPLATE/bug_report.md", ".github/ISSUE_TEMPLATE/feature_request.md"} {
		f := filepath.Join(root, filepath.FromSlash(name))
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		files = append(files, f)
	}
	for _, pattern := range []string{"*.md", "docs/*.md", ".github/*.md", ".github/ISSUE_TEMPLATE/*.md"} {
		found, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	}
	return files
}

func write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func countLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// checker resolves links against one repository root and caches the anchors
// of the Markdown files it has read.
type checker struct {
	root    string
	ignored []string // top-level names .gitignore anchors with a leading slash: absent from a clone
	anchors map[string]map[string]bool
}

func newChecker(root string) *checker {
	c := &checker{root: root, anchors: map[string]map[string]bool{}}
	if data, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "/") && !strings.ContainsAny(line, "*?[!") {
				if name := strings.Trim(line, "/"); name != "" && !strings.Contains(name, "/") {
					c.ignored = append(c.ignored, name)
				}
			}
		}
	}
	return c
}

// link is one link target found in a Markdown file.
type link struct {
	line   int
	target string
}

// checkFile returns one message per broken link of the file:
// "FILE:LINE: link TARGET: why".
func (c *checker) checkFile(file string) []string {
	data, err := os.ReadFile(file)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", c.rel(file), err)}
	}
	var problems []string
	for _, l := range extractLinks(string(data)) {
		if why := c.check(file, l.target); why != "" {
			problems = append(problems, fmt.Sprintf("%s:%d: link %s: %s", c.rel(file), l.line, l.target, why))
		}
	}
	return problems
}

// check returns why target, linked from file, is broken, or "".
func (c *checker) check(file, target string) string {
	lower := strings.ToLower(target)
	if strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://") || strings.HasPrefix(lower, "mailto:") {
		return ""
	}
	p, fragment, _ := strings.Cut(target, "#")
	p, _, _ = strings.Cut(p, "?")
	if p == "" { // #anchor within the same file
		if fragment == "" {
			return "empty link"
		}
		return c.checkAnchor(file, fragment)
	}
	decoded, err := url.PathUnescape(p)
	if err != nil {
		return fmt.Sprintf("bad escape: %v", err)
	}
	var abs string
	if strings.HasPrefix(decoded, "/") { // GitHub resolves these from the repository root
		abs = filepath.Join(c.root, filepath.FromSlash(path.Clean(decoded)))
		if strings.HasPrefix(path.Clean(strings.TrimPrefix(decoded, "/")), "..") {
			return "points outside the repository"
		}
	} else {
		abs = filepath.Join(filepath.Dir(file), filepath.FromSlash(decoded))
	}
	rel, err := filepath.Rel(c.root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "points outside the repository (a user's clone has nothing there)"
	}
	first := strings.Split(filepath.ToSlash(rel), "/")[0]
	for _, name := range c.ignored {
		if first == name {
			return fmt.Sprintf("points into /%s, which .gitignore keeps out of a clone", name)
		}
	}
	info, err := os.Stat(abs)
	if err != nil {
		return "no such file or directory in the repository"
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		realRoot, _ := filepath.EvalSymlinks(c.root)
		if r, err := filepath.Rel(realRoot, real); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return "resolves through a symbolic link to outside the repository"
		}
	}
	if fragment != "" && !info.IsDir() && strings.EqualFold(filepath.Ext(abs), ".md") {
		return c.checkAnchor(abs, fragment)
	}
	return ""
}

func (c *checker) checkAnchor(file, fragment string) string {
	anchors, ok := c.anchors[file]
	if !ok {
		data, err := os.ReadFile(file)
		if err != nil {
			return err.Error()
		}
		anchors = headingAnchors(string(data))
		c.anchors[file] = anchors
	}
	decoded, err := url.PathUnescape(fragment)
	if err != nil {
		decoded = fragment
	}
	if !anchors[strings.ToLower(decoded)] {
		return fmt.Sprintf("no heading of %s makes the anchor #%s", c.rel(file), fragment)
	}
	return ""
}

func (c *checker) rel(file string) string {
	if r, err := filepath.Rel(c.root, file); err == nil {
		return filepath.ToSlash(r)
	}
	return file
}

var (
	fenceRE     = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	atxRE       = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextRE    = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	inlineRE    = regexp.MustCompile(`\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>\n]*>|[^\s()]*)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	refDefRE    = regexp.MustCompile(`(?m)^ {0,3}\[([^\]\n]+)\]:[ \t]*(<[^>\n]*>|\S+)`)
	linkTextRE  = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTagRE   = regexp.MustCompile(`<[^>]+>`)
	backtickRun = regexp.MustCompile("`+")
)

// proseOnly returns the text with fenced code blocks and inline code spans
// replaced by spaces (newlines kept, so offsets keep their line numbers), and
// backslash-escaped brackets neutralised: what is left is where links can be.
func proseOnly(text string) string {
	lines := strings.SplitAfter(text, "\n")
	var fence string
	for i, line := range lines {
		trimmed := strings.TrimRight(line, "\r\n")
		if fence != "" {
			lines[i] = blank(line)
			if m := fenceRE.FindStringSubmatch(trimmed); m != nil && m[1][0] == fence[0] && len(m[1]) >= len(fence) && strings.TrimSpace(trimmed[len(m[0]):]) == "" {
				fence = ""
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(trimmed); m != nil {
			fence = m[1]
			lines[i] = blank(line)
		}
	}
	out := []byte(strings.Join(lines, ""))
	// Inline code: a run of n backticks up to the next run of exactly n.
	runs := backtickRun.FindAllIndex(out, -1)
	for i := 0; i < len(runs); i++ {
		n := runs[i][1] - runs[i][0]
		for j := i + 1; j < len(runs); j++ {
			if runs[j][1]-runs[j][0] == n {
				for k := runs[i][0]; k < runs[j][1]; k++ {
					if out[k] != '\n' {
						out[k] = ' '
					}
				}
				i = j
				break
			}
		}
	}
	s := string(out)
	s = strings.ReplaceAll(s, `\[`, "  ")
	s = strings.ReplaceAll(s, `\]`, "  ")
	return s
}

func blank(line string) string {
	if strings.HasSuffix(line, "\n") {
		return "\n"
	}
	return ""
}

// extractLinks finds inline links and images [text](target) (the text may
// span lines) and the targets of reference definitions [name]: target.
func extractLinks(text string) []link {
	prose := proseOnly(text)
	lineAt := func(offset int) int { return strings.Count(prose[:offset], "\n") + 1 }
	var links []link
	for _, m := range inlineRE.FindAllStringSubmatchIndex(prose, -1) {
		target := strings.Trim(prose[m[4]:m[5]], "<>")
		links = append(links, link{line: lineAt(m[4]), target: target})
	}
	for _, m := range refDefRE.FindAllStringSubmatchIndex(prose, -1) {
		target := strings.Trim(prose[m[4]:m[5]], "<>")
		links = append(links, link{line: lineAt(m[4]), target: target})
	}
	return links
}

// headingAnchors returns the GitHub anchors of every heading of a Markdown
// text (ATX and setext, outside code blocks), with GitHub's -1, -2 suffixes
// for repeated headings.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	add := func(heading string) {
		a := anchor(heading)
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	var fence, previous string
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1024*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if fence != "" {
			if m := fenceRE.FindStringSubmatch(line); m != nil && m[1][0] == fence[0] && len(m[1]) >= len(fence) {
				fence = ""
			}
			previous = ""
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			fence = m[1]
			previous = ""
			continue
		}
		if m := atxRE.FindStringSubmatch(line); m != nil {
			add(m[2])
			previous = ""
			continue
		}
		if setextRE.MatchString(line) && isParagraphLine(previous) {
			add(previous)
			previous = ""
			continue
		}
		previous = line
	}
	return anchors
}

// isParagraphLine tells whether a line can be the text of a setext heading.
func isParagraphLine(line string) bool {
	t := strings.TrimSpace(line)
	if t == "" || strings.HasPrefix(line, "    ") {
		return false
	}
	for _, p := range []string{"|", "#", "- ", "* ", "+ ", ">"} {
		if strings.HasPrefix(t, p) {
			return false
		}
	}
	return true
}

// anchor is GitHub's anchor of a heading: the heading's text (links reduced to
// their text, HTML tags dropped), lowercased, every space a hyphen, every other
// character but letters, digits, - and _ dropped (so `code` and **bold** lose
// their marks).
func anchor(heading string) string {
	h := linkTextRE.ReplaceAllString(heading, "$1")
	h = htmlTagRE.ReplaceAllString(h, "")
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
