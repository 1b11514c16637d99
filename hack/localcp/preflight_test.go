package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPreflightScript runs hack/realnode-preflight.sh, make's first step of
// the real-node lane, with a stand-in for `go run ./hack/localcp preflight`
// that answers as each kind of host would: the lane runs, fails with the
// reason, or, opted out, is skipped and says so in its log, in make test's
// summary and in a GitHub Actions annotation. Never a silent pass.
func TestPreflightScript(t *testing.T) {
	const reason = "this host cannot run the real node: cgroup v2 at /sys/fs/cgroup: cannot enable +cpu in /sys/fs/cgroup/cgroup.subtree_control: device or resource busy; 100% sure"
	for _, tc := range []struct {
		name     string
		exit     int
		stdout   string
		skip     bool
		wantExit int
		wantRC   string   // LOG.rc, "" for none
		want     []string // in the script's output
		summary  string   // in hack/test-lanes.sh summary
	}{
		{name: "supported", exit: 0, stdout: "host: cgroup v2 (unified)\nreal node: supported", wantExit: 0,
			want: []string{"::notice title=real node::host: cgroup v2 (unified)%0Areal node: supported"}},
		{name: "unsupported", exit: 3, stdout: "host: cgroup v2 (unified)\nlocalcp: " + reason, wantExit: 3, wantRC: "3",
			want:    []string{"[real-node] FAILED: " + reason, "::error title=real-node lane::FAILED: this host", "100%25 sure"},
			summary: "--- real-node: FAIL (exit 3)"},
		{name: "unsupported, opted out", exit: 3, stdout: "host: cgroup v2 (unified)\nlocalcp: " + reason, skip: true, wantExit: 10, wantRC: "skipped",
			want:    []string{"[real-node] SKIPPED (CONFIGSTAMP_REALNODE_UNSUPPORTED=skip): " + reason, "::warning title=real-node lane skipped::" + strings.ReplaceAll(reason, "%", "%25")},
			summary: "--- real-node: SKIPPED (CONFIGSTAMP_REALNODE_UNSUPPORTED=skip): " + reason},
		{name: "something to install, opted out or not", exit: 1, stdout: "localcp: control plane binaries missing: runc", skip: true, wantExit: 1, wantRC: "1",
			want:    []string{"[real-node] FAILED: the real node's preflight: control plane binaries missing: runc"},
			summary: "--- real-node: FAIL (exit 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fake := filepath.Join(dir, "go")
			script := "#!/bin/sh\ncat <<'OUT'\n" + tc.stdout + "\nOUT\nexit " + string(rune('0'+tc.exit)) + "\n"
			if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			log := filepath.Join(dir, "test", "real-node.log")
			cmd := exec.Command("bash", "../realnode-preflight.sh", log)
			cmd.Env = append(os.Environ(), "GO="+fake, "GITHUB_ACTIONS=true", "CONFIGSTAMP_REALNODE_UNSUPPORTED=")
			if tc.skip {
				cmd.Env = append(cmd.Env, "CONFIGSTAMP_REALNODE_UNSUPPORTED=skip")
			}
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantExit {
				t.Errorf("exit %d; want %d\n%s", code, tc.wantExit, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("no %q in\n%s", w, out)
				}
			}
			rc, _ := os.ReadFile(log + ".rc")
			if got := strings.TrimSpace(string(rc)); got != tc.wantRC {
				t.Errorf("LOG.rc %q; want %q", got, tc.wantRC)
			}
			if tc.summary == "" {
				return
			}
			sum, err := exec.Command("bash", "../test-lanes.sh", "summary", log).CombinedOutput()
			if err != nil {
				t.Fatal(err, string(sum))
			}
			if !strings.Contains(string(sum), tc.summary) {
				t.Errorf("summary lacks %q:\n%s", tc.summary, sum)
			}
		})
	}
}
