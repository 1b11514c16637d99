package images

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestBuildPause builds the pause preset and checks the archive as a
// container runtime would see it.
func TestBuildPause(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a Go program")
	}
	spec, err := Preset("pause", "../..", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var buildLog bytes.Buffer
	spec.Stderr = &buildLog
	if err := Build(t.Context(), spec); err != nil {
		t.Fatalf("Build: %v\n%s", err, buildLog.String())
	}

	tag, err := name.NewTag(PauseRef, name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(spec.Output, &tag)
	if err != nil {
		t.Fatalf("open %s as %s: %v", spec.Output, tag, err)
	}
	// manifest.json must name the image exactly as the kubelet asks for it.
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(spec.Output) })
	if err != nil {
		t.Fatalf("load manifest.json: %v", err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{PauseRef}) {
		t.Errorf("manifest.json = %+v, want one image tagged %s", m, PauseRef)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform = %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if cf.Config.User != "65535:65535" {
		t.Errorf("user = %q, want 65535:65535", cf.Config.User)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/pause"}) || len(cf.Config.Cmd) != 0 {
		t.Errorf("entrypoint, cmd = %q, %q; want [/pause], []", cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if cf.Config.WorkingDir != "/" {
		t.Errorf("working dir = %q, want /", cf.Config.WorkingDir)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	var bin []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read layer: %v", err)
		}
		names = append(names, h.Name)
		if h.Name != "pause" {
			continue
		}
		if h.Typeflag != tar.TypeReg || h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("pause: type %c mode %o owner %d:%d, want regular 0755 0:0", h.Typeflag, h.Mode, h.Uid, h.Gid)
		}
		if bin, err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(names, []string{"pause"}) {
		t.Fatalf("layer entries = %q, want [pause]", names)
	}
	assertStatic(t, bin)
}

func assertStatic(t *testing.T, bin []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("binary is not ELF: %v", err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary has a %v program header: not static", p.Type)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 0 {
		t.Errorf("binary needs %q: not static", libs)
	}
}

func TestBinaryLayerNested(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(bin, []byte("#!"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := binaryLayer(bin, "/usr/local/bin/x")
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var got []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mode %o owner %d:%d", h.Name, h.Mode, h.Uid, h.Gid)
		}
		got = append(got, string(h.Typeflag)+" "+h.Name)
	}
	want := []string{"5 usr/", "5 usr/local/", "5 usr/local/bin/", "0 usr/local/bin/x"}
	if !slices.Equal(got, want) {
		t.Errorf("entries = %q, want %q", got, want)
	}
}

func TestSpecValidate(t *testing.T) {
	ok := Spec{Package: "./x", Ref: "example.test/x:1", Output: "x.tar", Binary: "/x", User: "1:2"}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	for name, mut := range map[string]func(*Spec){
		"no package":      func(s *Spec) { s.Package = "" },
		"relative binary": func(s *Spec) { s.Binary = "x" },
		"root binary":     func(s *Spec) { s.Binary = "/" },
		"unclean binary":  func(s *Spec) { s.Binary = "/a/../x" },
		"named user":      func(s *Spec) { s.User = "nobody" },
		"empty gid":       func(s *Spec) { s.User = "1:" },
	} {
		s := ok
		mut(&s)
		if err := s.validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// A reference without registry or tag must not be silently normalised.
	s := ok
	for _, ref := range []string{"pause", "pause:3.10", "library/pause:3.10", "registry.k8s.io/pause"} {
		s.Ref = ref
		if err := Build(t.Context(), s); err == nil || !strings.Contains(err.Error(), "parse reference") {
			t.Errorf("Build with ref %q: err = %v, want a parse error", ref, err)
		}
	}
}
