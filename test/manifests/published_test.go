package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/hack/images"
)

// publishedName is the image the release workflow publishes,
// ghcr.io/${GITHUB_REPOSITORY,,}, for github.com/configstamp/configstamp.
const publishedName = "ghcr.io/configstamp/configstamp"

// versionRE is a release tag: a semantic version with a leading v.
var versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// TestManifestsNameThePublishedImage: config/manager names the image the
// release workflow publishes, at a version tag, so that the kustomize base at
// a release tag runs that release (a real cluster pulls it; the old
// configstamp:latest came from docker.io and never existed). The image make
// node-images builds from source (hack/images) carries that very name, so the
// README's blocks run it as they are on a node without a registry
// (test/realnode's install tests), and the pull policy lets a node use the image it holds.
// The release workflow refuses a tag config/manager does not name and pins
// the digest it pushed in the installers.
func TestManifestsNameThePublishedImage(t *testing.T) {
	dep := getAs[appsv1.Deployment](t, kustomize(t, "config/manager"), "Deployment", "controller-manager")
	c := dep.Spec.Template.Spec.Containers[0]
	slash := strings.LastIndex(c.Image, "/")
	colon := strings.LastIndex(c.Image, ":")
	if colon < slash || strings.Contains(c.Image, "@") {
		t.Fatalf("config/manager names the image %q: want %s:vX.Y.Z, by tag", c.Image, publishedName)
	}
	if name, tag := c.Image[:colon], c.Image[colon+1:]; name != publishedName || !versionRE.MatchString(tag) {
		t.Errorf("config/manager names the image %q: want %s:vX.Y.Z, what the release workflow publishes", c.Image, publishedName)
	}
	if c.Image != images.ConfigstampRef {
		t.Errorf("config/manager names %q, hack/images builds %q: make node-images must build the image the manifests name", c.Image, images.ConfigstampRef)
	}
	if c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("imagePullPolicy %q: want IfNotPresent, so that a node runs the image it imported", c.ImagePullPolicy)
	}

	workflow, err := os.ReadFile(filepath.Join(repoRoot(t), ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		// The tag's check: config/manager's image is the one published.
		"kubectl kustomize config/manager",
		`want="ghcr.io/${GITHUB_REPOSITORY,,}:${VERSION}"`,
		// The installers name the image by the digest pushed.
		"IMG: ${{ needs.image.outputs.image }}@${{ needs.image.outputs.digest }}",
		`make release-files-check IMG="$IMG" VERSION="$VERSION"`,
	} {
		if !strings.Contains(string(workflow), want) {
			t.Errorf(".github/workflows/release.yml lacks %q", want)
		}
	}
}
