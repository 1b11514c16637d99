package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

func TestResolveBuild(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for name, tc := range map[string]struct {
		bi         *debug.BuildInfo
		ldVersion  string
		ldRevision string
		want       buildInfo
	}{
		"module version and clean revision": {
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}, Settings: vcs("abc123", "false")},
			want: buildInfo{Version: "v0.3.0", Revision: "abc123", GoVersion: "go1.26.8"},
		},
		"modified tree": {
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.1-0.20260101000000-abc123+dirty"}, Settings: vcs("abc123", "true")},
			want: buildInfo{Version: "v0.3.1-0.20260101000000-abc123+dirty", Revision: "abc123+dirty", GoVersion: "go1.26.8"},
		},
		"link-time values win": {
			bi:        &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs("abc123", "true")},
			ldVersion: "v1.2.3-4-gabc123-dirty", ldRevision: "def456",
			want: buildInfo{Version: "v1.2.3-4-gabc123-dirty", Revision: "def456", GoVersion: "go1.26.8"},
		},
		"go test or no VCS": {
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			want: buildInfo{Version: "devel", Revision: "unknown", GoVersion: "go1.26.8"},
		},
		"no build information": {
			want: buildInfo{Version: "unknown", Revision: "unknown", GoVersion: runtime.Version()},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := resolveBuild(tc.bi, tc.ldVersion, tc.ldRevision); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestBuildInfoGauge(t *testing.T) {
	b := buildInfo{Version: "v1.2.3", Revision: "abc123", GoVersion: "go1.26.8"}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newBuildInfoGauge(b))
	want := `# HELP configstamp_build_info Always 1; the labels say which build of configstamp runs (version, VCS revision, Go version).
# TYPE configstamp_build_info gauge
configstamp_build_info{goversion="go1.26.8",revision="abc123",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "configstamp_build_info"); err != nil {
		t.Error(err)
	}
	// Registered on controller-runtime's registry, which /metrics serves.
	if n, err := testutil.GatherAndCount(metrics.Registry, "configstamp_build_info"); err != nil || n != 1 {
		t.Errorf("configstamp_build_info on metrics.Registry: %d series (%v), want 1", n, err)
	}
}

// TestVersionFlag builds the binary as the Makefile does (-ldflags -X) and
// runs --version: one line on stdout, nothing on stderr, exit status 0, no
// kubeconfig needed.
func TestVersionFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "configstamp")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin,
		"-ldflags", "-X main.version=v9.8.7-test -X main.revision=feedbeef", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(t.Context(), bin, "--version")
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("configstamp --version: %v\nstderr: %s", err, stderr.String())
	}
	want := "configstamp v9.8.7-test (revision feedbeef, " + runtime.Version() + ")\n"
	if stdout.String() != want || stderr.Len() != 0 {
		t.Errorf("stdout %q, stderr %q; want stdout %q and nothing on stderr", stdout.String(), stderr.String(), want)
	}
}
