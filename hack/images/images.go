// Package images builds the small container images the node tests run (the
// pod sandbox "pause" image and the test app) without Docker: a Go package is
// compiled into a static linux binary, the binary alone becomes the single
// layer of an image, and the image is written as a docker-archive tarball
// (manifest.json + config + layer), the format `ctr images import` and
// `docker load` read.
//
// go-containerregistry writes the image format (config, manifest,
// manifest.json); this package only writes the layer's tar stream.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// epoch is the timestamp of every layer entry and of the image config, so the
// same sources give the same image digest on every build.
var epoch = time.Unix(0, 0).UTC()

// Spec describes one single-binary image.
type Spec struct {
	// Package is the Go package to build, as `go build` takes it, e.g.
	// "./test/images/pause" (relative to Dir) or a full import path.
	Package string
	// Dir is the directory `go build` runs in (the module root for a
	// relative Package). Empty means the current directory.
	Dir string
	// Ref is the image reference written into the archive, with an explicit
	// registry and tag, e.g. "registry.k8s.io/pause:3.10".
	Ref string
	// Output is the path of the docker-archive file to write. It is written
	// to a temporary file next to it and renamed, so it never exists half
	// written.
	Output string
	// Binary is the absolute path of the binary inside the image, e.g.
	// "/pause". Parent directories are created as needed.
	Binary string
	// User is the numeric "uid:gid" the container runs as, e.g. "65532:65532".
	User string
	// Entrypoint defaults to []string{Binary}.
	Entrypoint []string
	// Cmd is the image's default arguments (none by default).
	Cmd []string
	// Env is the image's environment, "KEY=value" entries.
	Env []string
	// Labels are the image config labels.
	Labels map[string]string
	// GOARCH defaults to runtime.GOARCH (the host's, for a local node).
	GOARCH string
	// LDFlags are passed as -ldflags; empty means "-s -w" (no symbol table
	// or DWARF: the images are for running, not debugging).
	LDFlags string
	// Go is the go command; empty means "go" from PATH.
	Go string
	// Stderr receives the go build output; nil means os.Stderr.
	Stderr io.Writer
}

// Build compiles spec.Package, puts the binary into a one-layer image and
// writes the image to spec.Output as a docker archive.
func Build(ctx context.Context, spec Spec) error {
	if err := spec.validate(); err != nil {
		return fmt.Errorf("image %q: %w", spec.Ref, err)
	}
	// StrictValidation rejects a reference without a tag.
	tag, err := name.NewTag(spec.Ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image %q: parse reference: %w", spec.Ref, err)
	}
	// A reference without a registry ("pause:3.10") would be written as
	// index.docker.io/library/pause:3.10, which is not the name the kubelet
	// asks containerd for: require the name to survive parsing unchanged.
	if tag.String() != spec.Ref {
		return fmt.Errorf("image %q: parse reference: it would be written as %q; give the full name with registry and tag", spec.Ref, tag.String())
	}

	tmp, err := os.MkdirTemp("", "build-image-")
	if err != nil {
		return fmt.Errorf("image %q: %w", spec.Ref, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	bin := filepath.Join(tmp, path.Base(spec.Binary))
	if err := spec.compile(ctx, bin); err != nil {
		return fmt.Errorf("image %q: %w", spec.Ref, err)
	}
	img, err := spec.image(bin)
	if err != nil {
		return fmt.Errorf("image %q: %w", spec.Ref, err)
	}
	if err := writeArchive(spec.Output, tag, img); err != nil {
		return fmt.Errorf("image %q: %w", spec.Ref, err)
	}
	return nil
}

func (s *Spec) validate() error {
	switch {
	case s.Package == "":
		return errors.New("no Go package to build")
	case s.Ref == "":
		return errors.New("no image reference")
	case s.Output == "":
		return errors.New("no output archive path")
	case !path.IsAbs(s.Binary) || path.Clean(s.Binary) != s.Binary || s.Binary == "/":
		return fmt.Errorf("binary path %q is not a clean absolute file path", s.Binary)
	}
	if s.User != "" && !numericUser(s.User) {
		return fmt.Errorf("user %q is not numeric uid or uid:gid (the image has no /etc/passwd)", s.User)
	}
	return nil
}

func numericUser(u string) bool {
	for _, part := range strings.SplitN(u, ":", 2) {
		if part == "" || strings.Trim(part, "0123456789") != "" {
			return false
		}
	}
	return true
}

func (s *Spec) goarch() string {
	if s.GOARCH != "" {
		return s.GOARCH
	}
	return runtime.GOARCH
}

// compile runs go build for linux with cgo off, so the binary is static and
// runs in an image with nothing else in it.
func (s *Spec) compile(ctx context.Context, out string) error {
	goCmd := s.Go
	if goCmd == "" {
		goCmd = "go"
	}
	ldflags := s.LDFlags
	if ldflags == "" {
		ldflags = "-s -w"
	}
	// -buildvcs=false: the binary (and so the image digest) depends on the
	// sources only, not on the commit or a dirty work tree.
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-buildvcs=false",
		"-ldflags", ldflags, "-o", out, s.Package)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+s.goarch())
	cmd.Stdout = s.stderr()
	cmd.Stderr = s.stderr()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s (GOARCH=%s): %w", s.Package, s.goarch(), err)
	}
	return nil
}

func (s *Spec) stderr() io.Writer {
	if s.Stderr != nil {
		return s.Stderr
	}
	return os.Stderr
}

// image returns the one-layer image holding bin at s.Binary.
func (s *Spec) image(bin string) (v1.Image, error) {
	layerTar, err := binaryLayer(bin, s.Binary)
	if err != nil {
		return nil, err
	}
	// LayerFromOpener gzips the uncompressed stream itself and computes both
	// the digest and the diff ID.
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: epoch},
			CreatedBy: "build-image " + s.Package,
			Comment:   "static binary " + s.Binary,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = s.goarch()
	cf.Created = v1.Time{Time: epoch}
	cf.Config.User = s.User
	cf.Config.Entrypoint = s.Entrypoint
	if len(cf.Config.Entrypoint) == 0 {
		cf.Config.Entrypoint = []string{s.Binary}
	}
	cf.Config.Cmd = s.Cmd
	cf.Config.Env = s.Env
	cf.Config.WorkingDir = "/"
	if len(s.Labels) > 0 {
		cf.Config.Labels = make(map[string]string, len(s.Labels))
		for k, v := range s.Labels {
			cf.Config.Labels[k] = v
		}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// binaryLayer returns an uncompressed tar stream holding the parent
// directories of target (0755) and the file bin at target (0755), all owned by
// root. Entry names are relative ("pause", "usr/bin/x"), as in layers docker
// builds.
func binaryLayer(bin, target string) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("read binary: %w", err)
	}
	rel := strings.TrimPrefix(target, "/")
	var dirs []string
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs) // parents before children

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir,
			Name:     d + "/",
			Mode:     0o755,
			ModTime:  epoch,
		}); err != nil {
			return nil, fmt.Errorf("layer dir %s: %w", d, err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     rel,
		Mode:     0o755,
		Size:     int64(len(data)),
		ModTime:  epoch,
	}); err != nil {
		return nil, fmt.Errorf("layer file %s: %w", rel, err)
	}
	if _, err := tw.Write(data); err != nil {
		return nil, fmt.Errorf("layer file %s: %w", rel, err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

// writeArchive writes img tagged tag as a docker archive at out, atomically.
func writeArchive(out string, tag name.Tag, img v1.Image) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("output dir: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	tmpName := f.Name()
	defer func() { _ = os.Remove(tmpName) }() // fails harmlessly after the rename
	if err := tarball.Write(tag, img, f); err != nil {
		f.Close()
		return fmt.Errorf("write archive %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write archive %s: %w", out, err)
	}
	if err := os.Chmod(tmpName, 0o644); err != nil {
		return fmt.Errorf("write archive %s: %w", out, err)
	}
	if err := os.Rename(tmpName, out); err != nil {
		return fmt.Errorf("write archive %s: %w", out, err)
	}
	return nil
}
