package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLaneSummaryEndsWithWhatFailed: a CI page that keeps only the tail of
// make test's output still shows which test failed, at every level, and
// its message — not only the top-level test's name.
func TestLaneSummaryEndsWithWhatFailed(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "real-node.log")
	out := `=== RUN   TestForms
--- FAIL: TestForms (0.00s)
    --- PASS: TestForms/a_crash (80.1s)
        judged_test.go:100: first sign 2s after the change
    --- FAIL: TestForms/a_volume_key (123.4s)
        judged_test.go:100: first sign 31s after the change
        judged_test.go:112: first failed 33s after the change, want within 30s
FAIL
FAIL	example.com/test/realnode	1003.396s
ok  	example.com/test/install	558.784s
`
	if err := os.WriteFile(log, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log+".rc", []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum, err := exec.Command("bash", "../test-lanes.sh", "summary", log).CombinedOutput()
	if err != nil {
		t.Fatalf("summary: %v\n%s", err, sum)
	}
	lines := strings.Split(strings.TrimSpace(string(sum)), "\n")
	tail := strings.Join(lines[len(lines)-5:], "\n")
	for _, want := range []string{"--- FAIL: TestForms/a_volume_key", "want within 30s", "FAIL\texample.com/test/realnode"} {
		if !strings.Contains(tail, want) {
			t.Errorf("the summary's last lines lack %q:\n%s", want, tail)
		}
	}
	if strings.Contains(string(sum), "first sign 2s") {
		t.Errorf("the summary shows a passing subtest's lines:\n%s", sum)
	}
}

// TestLaneSummaryShowsAFailedMakeStep: the checks lane is a make of
// release-check-host, bench-smoke and argo-rollouts, not a go test; when it
// fails, the summary's last lines are the log's own, where make said why,
// and every lane run says how long it took.
func TestLaneSummaryShowsAFailedMakeStep(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "checks.log")
	script := `echo "==> building krew"; echo "bench-smoke: results.md has no memory floor" >&2; exit 2`
	out, err := exec.Command("bash", "../test-lanes.sh", "run", "checks", log, "bash", "-c", script).CombinedOutput()
	if err == nil {
		t.Fatalf("run exited 0 for a failing step:\n%s", out)
	}
	if !strings.Contains(string(out), "[checks] bench-smoke: results.md has no memory floor") {
		t.Errorf("run's output lacks the prefixed line:\n%s", out)
	}
	sum, err := exec.Command("bash", "../test-lanes.sh", "summary", log).CombinedOutput()
	if err != nil {
		t.Fatalf("summary: %v\n%s", err, sum)
	}
	lines := strings.Split(strings.TrimSpace(string(sum)), "\n")
	if last := lines[len(lines)-1]; last != "bench-smoke: results.md has no memory floor" {
		t.Errorf("the summary's last line is %q; want make's reason:\n%s", last, sum)
	}
	if !regexp.MustCompile(`--- checks: FAIL \(exit 2\) in [0-9]+ s`).Match(sum) {
		t.Errorf("the summary lacks the lane's outcome and time:\n%s", sum)
	}
}
