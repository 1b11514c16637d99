package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// releaseFence opens the README's install from a release: it downloads a
// published release, so test/realnode's install tests, which run the first block fenced
// exactly ```sh under a heading, must never select it (no network on its
// node). Its URLs are checked here instead.
const releaseFence = "```sh release"

var (
	releaseURLRE = regexp.MustCompile(`https://github\.com/configstamp/configstamp/releases/download/([^/\s'"]+)/([^\s'"]+)`)
	remoteBaseRE = regexp.MustCompile(`https://github\.com/configstamp/configstamp//([^?\s'"]+)\?ref=([^\s'"]+)`)
	newTagRE     = regexp.MustCompile(`(?m)^\s+newTag:\s*"?([^"\s]+)"?\s*$`)
	versionRE    = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)
)

// TestReadmeReleaseInstall checks the README's install from a release, which
// no test can run offline: it is fenced so that the install tests never run it;
// its release URLs and its kustomize base name the version config/manager
// names (the release workflow refuses a tag that differs, so at a tag they
// name that very release) and that version is a tag of this clone or the
// next one; the files it downloads are ones the release workflow publishes;
// the base it applies is an overlay of config/. No block the install tests run
// downloads a release.
func TestReadmeReleaseInstall(t *testing.T) {
	root := repoRoot(t)
	readme := readFile(t, root, "README.md")
	blocks := fencedBlocks(readme)
	var release []string
	for _, b := range blocks {
		switch {
		case b.fence == releaseFence:
			release = append(release, b.body)
		case strings.Contains(b.body, "/releases/download/") || strings.Contains(b.body, "?ref="):
			t.Errorf("README.md: a block fenced %q downloads a release; fence it %q so that the install tests do not run it", b.fence, releaseFence)
		}
	}
	if len(release) == 0 {
		t.Fatalf("README.md has no %s block (the install from a release)", releaseFence)
	}

	m := newTagRE.FindStringSubmatch(readFile(t, root, "config/manager/kustomization.yaml"))
	if m == nil {
		t.Fatal("config/manager/kustomization.yaml sets no newTag")
	}
	version := m[1]
	if !versionRE.MatchString(version) {
		t.Fatalf("config/manager's newTag %q is not a release version vX.Y.Z", version)
	}
	checkVersionExists(t, root, version)

	workflow := readFile(t, root, ".github/workflows/release.yml")
	var files, bases int
	for _, body := range release {
		for _, u := range releaseURLRE.FindAllStringSubmatch(body, -1) {
			files++
			if u[1] != version {
				t.Errorf("README.md: %s names %s; config/manager names %s", u[0], u[1], version)
			}
			if !strings.Contains(workflow, u[2]) {
				t.Errorf("README.md: %s: the release workflow publishes no %s", u[0], u[2])
			}
		}
		for _, u := range remoteBaseRE.FindAllStringSubmatch(body, -1) {
			bases++
			if u[2] != version {
				t.Errorf("README.md: %s names %s; config/manager names %s", u[0], u[2], version)
			}
			if !strings.HasPrefix(u[1], "config/") {
				t.Errorf("README.md: %s: %s is not an overlay under config/", u[0], u[1])
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(u[1]), "kustomization.yaml")); err != nil {
				t.Errorf("README.md: %s: %v", u[0], err)
			}
		}
	}
	if files == 0 || bases == 0 {
		t.Errorf("README.md's release install names %d release files and %d kustomize bases; want the installer and the base", files, bases)
	}

	// SECURITY.md's verification downloads the same release.
	if m := regexp.MustCompile(`(?m)^v=(\S+)$`).FindStringSubmatch(readFile(t, root, "SECURITY.md")); m == nil || m[1] != version {
		t.Errorf("SECURITY.md's verification sets v=%v; config/manager names %s", m, version)
	}
}

// checkVersionExists fails unless version is a tag of this clone, or, when the
// clone has no such tag, newer than each of its tags: the release this tree
// becomes (a release commit sets it, then is tagged). Without git or tags
// there is nothing more to check.
func checkVersionExists(t *testing.T, root, version string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "tag", "--list", "v*").Output()
	if err != nil {
		t.Logf("git tag: %v; the version %s is not compared with the tags", err, version)
		return
	}
	for _, tag := range strings.Fields(string(out)) {
		if tag == version {
			return
		}
	}
	for _, tag := range strings.Fields(string(out)) {
		if versionRE.MatchString(tag) && !versionLess(tag, version) {
			t.Errorf("config/manager and the README name %s, which is not a tag, and the tag %s is newer: name the latest release", version, tag)
		}
	}
}

// versionLess compares the numbers of two versions vX.Y.Z (a pre-release
// counts as its release).
func versionLess(a, b string) bool {
	na, nb := versionNumbers(a), versionNumbers(b)
	for i := range na {
		if na[i] != nb[i] {
			return na[i] < nb[i]
		}
	}
	return false
}

func versionNumbers(v string) [3]int {
	m := versionRE.FindStringSubmatch(v)
	var n [3]int
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return n
}

// block is a fenced code block: its opening fence line and its lines.
type block struct {
	fence, body string
}

// fencedBlocks returns the ``` fenced blocks of a Markdown text.
func fencedBlocks(text string) []block {
	var out []block
	var cur *block
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &block{fence: trimmed}
			lines = nil
		case cur != nil && trimmed == "```":
			cur.body = strings.Join(lines, "\n")
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, l)
		}
	}
	return out
}

func readFile(t *testing.T, root, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
