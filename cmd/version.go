package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// version and revision are set at link time by the Makefile (and the
// Dockerfile, whose build context has no .git):
//
//	go build -ldflags "-X main.version=v0.3.0 -X main.revision=<commit>" ./cmd
//
// Empty: taken from the build information the Go toolchain embeds (the main
// module's version, vcs.revision and vcs.modified).
var (
	version  string
	revision string
)

// showVersion is --version, on the command line parseFlags parses.
var showVersion = flag.Bool("version", false, "Print the version, VCS revision and Go version, and exit.")

// buildInfo is what --version prints and configstamp_build_info carries.
type buildInfo struct {
	Version   string
	Revision  string
	GoVersion string
}

// currentBuild resolves the build of the running binary.
func currentBuild() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return resolveBuild(bi, version, revision)
}

// resolveBuild prefers the link-time values and falls back to the embedded
// build information. A binary built from a tree with uncommitted changes gets
// "+dirty" on its revision (Go's own spelling for such builds).
func resolveBuild(bi *debug.BuildInfo, ldVersion, ldRevision string) buildInfo {
	out := buildInfo{Version: ldVersion, Revision: ldRevision, GoVersion: runtime.Version()}
	if bi == nil {
		if out.Version == "" {
			out.Version = "unknown"
		}
		if out.Revision == "" {
			out.Revision = "unknown"
		}
		return out
	}
	if bi.GoVersion != "" {
		out.GoVersion = bi.GoVersion
	}
	if out.Version == "" {
		// "(devel)" when built without VCS information, e.g. by go test.
		out.Version = bi.Main.Version
		if out.Version == "" || out.Version == "(devel)" {
			out.Version = "devel"
		}
	}
	if out.Revision == "" {
		var rev string
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		switch {
		case rev == "":
			out.Revision = "unknown"
		case modified:
			out.Revision = rev + "+dirty"
		default:
			out.Revision = rev
		}
	}
	return out
}

func (b buildInfo) String() string {
	return fmt.Sprintf("configstamp %s (revision %s, %s)", b.Version, b.Revision, b.GoVersion)
}

// printVersion writes --version's one line. main's only output on stdout.
func printVersion(w io.Writer) error {
	_, err := fmt.Fprintln(w, currentBuild())
	return err
}

// newBuildInfoGauge is configstamp_build_info: always 1, the build in its
// labels (one series per process), so dashboards can show and join the
// version (e.g. `* on(instance) group_left(version)`).
func newBuildInfoGauge(b buildInfo) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "configstamp_build_info",
		Help: "Always 1; the labels say which build of configstamp runs (version, VCS revision, Go version).",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}

func init() {
	metrics.Registry.MustRegister(newBuildInfoGauge(currentBuild()))
}
