package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// fakeRelease writes a fake binary per platform and runs the generator on them.
func fakeRelease(t *testing.T, version string) (string, *options, error) {
	t.Helper()
	dir := t.TempDir()
	for _, p := range Platforms {
		d := filepath.Join(dir, "plugin", p.OS+"_"+p.Arch)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, p.Bin()), []byte("binary for "+p.String()), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "LICENSE"), []byte("Apache License\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &options{
		version: version, plugins: filepath.Join(dir, "plugin"), license: filepath.Join(dir, "LICENSE"),
		out: filepath.Join(dir, "dist"), url: "https://example.com/releases/download/" + version + "/",
		mtime:       time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		checkBinary: func(string, Platform, string) error { return nil },
	}
	_, err := o.run()
	return dir, o, err
}

// TestManifestDescribesTheArchives: every platform's uri names its archive,
// its sha256 is the archive's, checksums.txt agrees, and each archive holds
// exactly the binary (executable) and LICENSE.
func TestManifestDescribesTheArchives(t *testing.T) {
	_, o, err := fakeRelease(t, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(o.out, "configstamp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name string }
		Spec       struct {
			Platforms []struct {
				Selector struct{ MatchLabels map[string]string }
				URI      string
				Sha256   string
				Bin      string
				Files    []struct{ From, To string }
			}
			Version, Homepage, ShortDescription, Description, Caveats string
		}
	}
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		t.Fatalf("manifest: %v\n%s", err, data)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "configstamp" || m.Spec.Version != "v1.2.3" {
		t.Errorf("manifest header: %+v", m)
	}
	if m.Spec.Homepage == "" || m.Spec.ShortDescription == "" || m.Spec.Description == "" {
		t.Errorf("manifest lacks homepage, shortDescription or description:\n%s", data)
	}
	if len(m.Spec.Platforms) != 6 {
		t.Fatalf("%d platforms, want 6", len(m.Spec.Platforms))
	}
	sums, err := os.ReadFile(filepath.Join(o.out, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for i, mp := range m.Spec.Platforms {
		p := Platforms[i]
		if mp.Selector.MatchLabels["os"] != p.OS || mp.Selector.MatchLabels["arch"] != p.Arch || mp.Bin != p.Bin() {
			t.Errorf("platform %d: %+v, want %s with bin %s", i, mp, p, p.Bin())
		}
		archive := p.Archive("v1.2.3")
		if mp.URI != "https://example.com/releases/download/v1.2.3/"+archive {
			t.Errorf("%s: uri %s", p, mp.URI)
		}
		raw, err := os.ReadFile(filepath.Join(o.out, archive))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(raw)
		if got := hex.EncodeToString(sum[:]); mp.Sha256 != got {
			t.Errorf("%s: manifest sha256 %s, archive's %s", p, mp.Sha256, got)
		}
		if !strings.Contains(string(sums), mp.Sha256+"  "+archive+"\n") {
			t.Errorf("%s: checksums.txt lacks %s  %s:\n%s", p, mp.Sha256, archive, sums)
		}
		got := archiveFiles(t, filepath.Join(o.out, archive))
		want := map[string]string{p.Bin(): "binary for " + p.String(), "LICENSE": "Apache License\n"}
		if len(got) != len(want) {
			t.Errorf("%s: archive holds %v", p, got)
		}
		for name, content := range want {
			if got[name] != content {
				t.Errorf("%s: %s holds %q, want %q", archive, name, got[name], content)
			}
		}
	}
}

// archiveFiles reads a tar.gz or zip; it fails the test if the binary is not executable.
func archiveFiles(t *testing.T, path string) map[string]string {
	t.Helper()
	files := map[string]string{}
	if strings.HasSuffix(path, ".zip") {
		zr, err := zip.OpenReader(path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = zr.Close() }()
		for _, f := range zr.File {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			_ = rc.Close()
			files[f.Name] = string(b)
		}
		return files
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == Binary && h.Mode&0o111 == 0 {
			t.Errorf("%s: %s is not executable (mode %o)", path, h.Name, h.Mode)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = string(b)
	}
	return files
}

// TestArchivesAreReproducible: the same inputs give the same bytes (the
// checksums of a release can be rebuilt).
func TestArchivesAreReproducible(t *testing.T) {
	_, o1, err := fakeRelease(t, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	_, o2, err := fakeRelease(t, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(o1.out, "checksums.txt"))
	b, _ := os.ReadFile(filepath.Join(o2.out, "checksums.txt"))
	if !bytes.Equal(a, b) || len(a) == 0 {
		t.Errorf("two runs differ:\n%s\n%s", a, b)
	}
}

func TestRefusesWhatKrewWould(t *testing.T) {
	for _, v := range []string{"1.2.3", "v1.2", "f5d7bcd-dirty", "v01.2.3", ""} {
		if _, _, err := fakeRelease(t, v); err == nil {
			t.Errorf("version %q accepted", v)
		}
	}
	for _, v := range []string{"v0.0.0-dev", "v1.2.3-rc.1", "v1.2.3-4-gf5d7bcd-dirty"} {
		if _, _, err := fakeRelease(t, v); err != nil {
			t.Errorf("version %q: %v", v, err)
		}
	}
}

// TestBinaryChecked: a binary the check refuses stops the generator, and
// checkBuildInfo refuses a file that is no Go binary.
func TestBinaryChecked(t *testing.T) {
	dir, o, err := fakeRelease(t, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	o.checkBinary = func(path string, p Platform, version string) error {
		asked = append(asked, p.String())
		if p.OS == "darwin" {
			return errors.New("built for linux/amd64, not " + p.String())
		}
		return nil
	}
	if _, err := o.run(); err == nil || !strings.Contains(err.Error(), "not darwin/amd64") {
		t.Errorf("run: %v, want the check's error", err)
	}
	if !slices.Equal(asked, []string{"linux/amd64", "linux/arm64", "darwin/amd64"}) {
		t.Errorf("checked %v", asked)
	}
	if err := checkBuildInfo(filepath.Join(dir, "plugin", "linux_amd64", Binary), Platform{"linux", "amd64"}, "v1.0.0"); err == nil {
		t.Error("checkBuildInfo accepted a file that is no Go binary")
	}
}

func TestIsTagged(t *testing.T) {
	for v, want := range map[string]bool{
		"v1.2.3": true, "v1.2.3-rc.1": true, "(devel)": false, "": false,
		"v0.0.0-20261126105800-f5d7bcd01234": false, "v1.2.4-0.20261126105800-f5d7bcd01234": false,
		"v1.2.3+dirty": false, "v0.0.0-20261126105800-f5d7bcd01234+dirty": false,
	} {
		if got := isTagged(v); got != want {
			t.Errorf("isTagged(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestPlatformsSubset: -platforms (make test passes the host's alone) archives
// and lists those platforms only, in the release's order, and needs no binary
// of the others; an unknown target is refused; empty means all six.
func TestPlatformsSubset(t *testing.T) {
	if ps, err := selectPlatforms(""); err != nil || ps != nil {
		t.Fatalf("empty -platforms: %v, %v; want nil (all)", ps, err)
	}
	if _, err := selectPlatforms("linux/amd64 plan9/386"); err == nil {
		t.Fatal("plan9/386 accepted")
	}
	ps, err := selectPlatforms("windows/arm64,linux/amd64")
	if err != nil {
		t.Fatal(err)
	}
	if want := []Platform{{"linux", "amd64"}, {"windows", "arm64"}}; !slices.Equal(ps, want) {
		t.Fatalf("platforms %v, want %v", ps, want)
	}

	dir := t.TempDir()
	d := filepath.Join(dir, "plugin", "linux_amd64")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, Binary), []byte("binary for linux/amd64"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "LICENSE"), []byte("Apache License\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &options{
		version: "v1.2.3", plugins: filepath.Join(dir, "plugin"), license: filepath.Join(dir, "LICENSE"),
		out: filepath.Join(dir, "dist"), url: "https://example.com/releases/download/v1.2.3",
		checkBinary: func(string, Platform, string) error { return nil },
		platforms:   []Platform{{"linux", "amd64"}},
	}
	if _, err := o.run(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(o.out, "configstamp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "- selector:"); n != 1 || !strings.Contains(string(data), "os: linux") {
		t.Errorf("manifest lists %d platforms, want linux/amd64 alone:\n%s", n, data)
	}
	entries, err := os.ReadDir(o.out)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 { // the archive, checksums.txt, configstamp.yaml
		t.Errorf("wrote %d files, want 3", len(entries))
	}
}
