// Command krew writes the release artefacts of the kubectl plugin from the
// binaries `make plugin-dist` cross-compiled: one archive per platform (a
// tar.gz for linux and darwin, a zip for windows, each holding
// kubectl-configstamp[.exe] and LICENSE), checksums.txt (sha256sum's format)
// and the krew plugin manifest configstamp.yaml, whose platforms carry each
// archive's release URL and sha256.
//
//	go run ./hack/krew -version=v1.2.3 -plugins=dist/plugin -license=LICENSE -out=dist \
//	  -url=https://github.com/configstamp/configstamp/releases/download/v1.2.3
//
// Before archiving, it reads each binary's Go build information: it must be
// the plugin built for the platform its directory names, and, when Go stamped
// a tag's version into it, for the manifest's version.
// Archives are reproducible: fixed order, modes and times (SOURCE_DATE_EPOCH).
// `make krew-validate` then checks the manifest with krew itself.
package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Plugin is the krew plugin's name: the manifest is <Plugin>.yaml and users
// run `kubectl krew install configstamp`.
const Plugin = "configstamp"

// Binary is the plugin binary's name without the .exe of windows.
const Binary = "kubectl-configstamp"

// Platforms are the release's targets, in the manifest's order.
var Platforms = []Platform{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

// Platform is one GOOS/GOARCH target.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// Bin is the binary's file name on the platform.
func (p Platform) Bin() string {
	if p.OS == "windows" {
		return Binary + ".exe"
	}
	return Binary
}

// Archive is the archive's file name for a version.
func (p Platform) Archive(version string) string {
	ext := ".tar.gz"
	if p.OS == "windows" {
		ext = ".zip"
	}
	return fmt.Sprintf("%s_%s_%s_%s%s", Binary, version, p.OS, p.Arch, ext)
}

// semverRE is krew's spec.version: a semantic version with a leading v.
var semverRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

func main() {
	var o options
	flag.StringVar(&o.version, "version", "", "the release's version, vX.Y.Z (the tag)")
	flag.StringVar(&o.plugins, "plugins", "dist/plugin", "the directory make plugin-dist wrote: <os>_<arch>/kubectl-configstamp[.exe]")
	flag.StringVar(&o.license, "license", "LICENSE", "the license file every archive holds")
	flag.StringVar(&o.out, "out", "dist", "where the archives, checksums.txt and configstamp.yaml go")
	flag.StringVar(&o.url, "url", "", "the URL the archives are downloaded from (the release's download URL)")
	platforms := flag.String("platforms", "", "os/arch targets to archive and list, space- or comma-separated (default: all six; make test: the host's alone)")
	flag.Parse()
	var err error
	if o.platforms, err = selectPlatforms(*platforms); err != nil {
		fail(err)
	}
	o.mtime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fail(fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err))
		}
		if t := time.Unix(sec, 0).UTC(); t.After(o.mtime) {
			o.mtime = t
		}
	}
	o.checkBinary = checkBuildInfo
	written, err := o.run()
	if err != nil {
		fail(err)
	}
	for _, f := range written {
		_, _ = fmt.Fprintln(os.Stdout, f)
	}
}

func fail(err error) {
	_, _ = fmt.Fprintf(os.Stderr, "hack/krew: %v\n", err)
	os.Exit(1)
}

type options struct {
	version, plugins, license, out, url string
	mtime                               time.Time
	// platforms are the archives and the manifest's platforms; nil: Platforms.
	platforms []Platform
	// checkBinary returns why the binary is not the plugin built for p at
	// version, or nil.
	checkBinary func(path string, p Platform, version string) error
}

// built is one platform's archive.
type built struct {
	Platform
	Archive, URI, Sha256 string
}

// run writes the archives, checksums.txt and the manifest; it returns their paths.
func (o *options) run() ([]string, error) {
	if !semverRE.MatchString(o.version) {
		return nil, fmt.Errorf("-version %q is not a semantic version with a leading v (krew's spec.version)", o.version)
	}
	if o.url == "" {
		return nil, fmt.Errorf("-url is required")
	}
	license, err := os.ReadFile(o.license)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	var (
		archives []built
		written  []string
		sums     strings.Builder
	)
	platforms := o.platforms
	if platforms == nil {
		platforms = Platforms
	}
	for _, p := range platforms {
		binPath := filepath.Join(o.plugins, p.OS+"_"+p.Arch, p.Bin())
		bin, err := os.ReadFile(binPath)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (run make plugin-dist)", p, err)
		}
		if err := o.checkBinary(binPath, p, o.version); err != nil {
			return nil, fmt.Errorf("%s: %w", binPath, err)
		}
		files := []file{{p.Bin(), bin, 0o755}, {"LICENSE", license, 0o644}}
		var data []byte
		if p.OS == "windows" {
			data, err = zipOf(files, o.mtime)
		} else {
			data, err = tarGzOf(files, o.mtime)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		b := built{Platform: p, Archive: p.Archive(o.version)}
		sum := sha256.Sum256(data)
		b.Sha256 = hex.EncodeToString(sum[:])
		b.URI = strings.TrimSuffix(o.url, "/") + "/" + b.Archive
		path := filepath.Join(o.out, b.Archive)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return nil, err
		}
		written = append(written, path)
		archives = append(archives, b)
		fmt.Fprintf(&sums, "%s  %s\n", b.Sha256, b.Archive)
	}
	var manifest bytes.Buffer
	if err := manifestTemplate.Execute(&manifest, struct {
		Name, Version, Binary string
		Platforms             []built
	}{Plugin, o.version, Binary, archives}); err != nil {
		return nil, err
	}
	manifestPath := filepath.Join(o.out, Plugin+".yaml")
	if err := os.WriteFile(manifestPath, manifest.Bytes(), 0o644); err != nil {
		return nil, err
	}
	sumsPath := filepath.Join(o.out, "checksums.txt")
	if err := os.WriteFile(sumsPath, []byte(sums.String()), 0o644); err != nil {
		return nil, err
	}
	return append(written, sumsPath, manifestPath), nil
}

// checkBuildInfo reads the Go build information of the binary: it must be
// cmd/kubectl-configstamp built for p (GOOS, GOARCH). When Go stamped the
// module's version from a tag (a build at a tagged commit: the release), that
// version must be the manifest's. (With -trimpath Go records no -ldflags, and
// the plugin has no version variable yet, so -X main.version cannot be read
// back.)
func checkBuildInfo(path string, p Platform, version string) error {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading its Go build information: %w", err)
	}
	if info.Path != "github.com/configstamp/configstamp/cmd/kubectl-configstamp" {
		return fmt.Errorf("built from %s, not cmd/kubectl-configstamp", info.Path)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if got := settings["GOOS"] + "/" + settings["GOARCH"]; got != p.String() {
		return fmt.Errorf("built for %s, not %s", got, p)
	}
	if v := info.Main.Version; isTagged(v) && v != version {
		return fmt.Errorf("built at tag %s, but the manifest is for %s", v, version)
	}
	return nil
}

// selectPlatforms reads -platforms: a subset of Platforms, in their order (a
// release lists all six; make test builds and validates the host's alone).
// Empty: nil, all of them.
func selectPlatforms(list string) ([]Platform, error) {
	names := strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' })
	if len(names) == 0 {
		return nil, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		known := false
		for _, p := range Platforms {
			known = known || p.String() == n
		}
		if !known {
			return nil, fmt.Errorf("-platforms: %q is not one of the release's targets", n)
		}
		want[n] = true
	}
	var out []Platform
	for _, p := range Platforms {
		if want[p.String()] {
			out = append(out, p)
		}
	}
	return out, nil
}

// taggedRE matches a module version Go took from a tag: a semantic version
// that is no pseudo-version (…-yyyymmddhhmmss-abcdefabcdef) and not +dirty.
var taggedRE = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// isTagged tells a version taken from a tag from a pseudo-version.
func isTagged(v string) bool {
	return taggedRE.MatchString(v) && !pseudoRE.MatchString(v)
}

var pseudoRE = regexp.MustCompile(`\d{14}-[0-9a-f]{12}$`)

// file is one file of an archive.
type file struct {
	name string
	data []byte
	mode int64
}

func tarGzOf(files []file, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	gz.ModTime = mtime
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func zipOf(files []file, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: mtime}
		h.SetMode(os.FileMode(f.mode))
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := io.Copy(w, bytes.NewReader(f.data)); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// manifestTemplate is the krew plugin manifest
// (https://krew.sigs.k8s.io/docs/developer-guide/plugin-manifest/).
var manifestTemplate = template.Must(template.New("manifest").Parse(`# Generated by hack/krew (make krew-manifest) for {{.Version}}; do not edit.
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: {{.Name}}
spec:
  version: {{.Version}}
  homepage: https://github.com/configstamp/configstamp
  shortDescription: See and steer configstamp's config-driven rollouts
  description: |
    configstamp restarts Deployments, StatefulSets and DaemonSets when the
    ConfigMaps and Secrets they use change, through ordinary rolling updates.
    This plugin asks it: which workloads use a ConfigMap or Secret and which
    keys (who-uses), what applying a manifest would roll (plan), why a
    workload rolled (why), which rollouts are in flight and halted (status),
    and lifts a halt (resume). It reads with your own kubeconfig and
    permissions and never prints Secret data.
  caveats: |
    The plugin reads what configstamp wrote in the cluster: install
    configstamp first (https://github.com/configstamp/configstamp#install-in-a-cluster).
  platforms:
{{- range .Platforms}}
    - selector:
        matchLabels:
          os: {{.OS}}
          arch: {{.Arch}}
      uri: {{.URI}}
      sha256: {{.Sha256}}
      bin: {{.Bin}}
      files:
        - from: {{.Bin}}
          to: .
        - from: LICENSE
          to: .
{{- end}}
`))
