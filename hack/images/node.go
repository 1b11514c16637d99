package images

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
)

// The references the node tests use. PauseRef is what the kubelet and
// containerd's CRI plugin ask for as the pod sandbox image; it is never
// pulled, so it must be imported before the first pod starts.
const (
	PauseRef   = "registry.k8s.io/pause:3.10"
	TestAppRef = "configstamp.test/testapp:dev"
	// ConfigstampRef is configstamp's own image built like the Dockerfile's
	// (TestDockerfileInStep), under the name config/manager gives the manager
	// (the image the release publishes, test/manifests checks they agree), so
	// that `kubectl apply -k config/...` runs it on a node that imported it.
	ConfigstampRef = "ghcr.io/configstamp/configstamp:v0.1.0"
)

// Archive file names under the output directory (bin/images in the Makefile).
const (
	PauseArchive   = "pause.tar"
	TestAppArchive = "testapp.tar"
)

// Presets are the node images by name: the Makefile and build-image -preset
// use these, so the reference, user and paths are written down once.
// The Package paths are relative to the module root (Spec.Dir).
var Presets = map[string]Spec{
	"pause": {
		Package: "./test/images/pause",
		Ref:     PauseRef,
		Binary:  "/pause",
		// 65535 is the user upstream's pause image runs as.
		User:   "65535:65535",
		Labels: map[string]string{"org.opencontainers.image.title": "pause (configstamp node tests)"},
	},
	// configstamp: what the Dockerfile builds (TestDockerfileInStep keeps the
	// two in step): ./cmd, static, at /configstamp, run as 65532:65532.
	"configstamp": {
		Package: "./cmd",
		Ref:     ConfigstampRef,
		Binary:  "/configstamp",
		User:    "65532:65532",
		LDFlags: "-X main.version=node-test",
		Labels:  map[string]string{"org.opencontainers.image.title": "configstamp"},
	},
	"testapp": {
		Package: "./test/images/testapp",
		Ref:     TestAppRef,
		Binary:  "/testapp",
		User:    "65532:65532",
		Labels:  map[string]string{"org.opencontainers.image.title": "configstamp test app"},
	},
}

// PresetNames returns the names of Presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns the preset spec name, built from moduleRoot and written to
// outDir/<name>.tar.
func Preset(name, moduleRoot, outDir string) (Spec, error) {
	s, ok := Presets[name]
	if !ok {
		return Spec{}, fmt.Errorf("no image preset %q (have %v)", name, PresetNames())
	}
	s.Dir = moduleRoot
	s.Output = filepath.Join(outDir, name+".tar")
	return s, nil
}

// BuildNodeImages builds every preset (pause.tar, testapp.tar, configstamp.tar) from the
// module at moduleRoot into outDir, for tests that do not go through make.
func BuildNodeImages(ctx context.Context, moduleRoot, outDir string) error {
	for _, n := range PresetNames() {
		s, err := Preset(n, moduleRoot, outDir)
		if err != nil {
			return err
		}
		if err := Build(ctx, s); err != nil {
			return err
		}
	}
	return nil
}
