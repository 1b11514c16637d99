package images

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfileInStep keeps the configstamp preset (the image the real-node
// install test runs) and the Dockerfile (the release path) in step: the same
// package, a static build with -trimpath, the binary at the same path, the
// same numeric user and entrypoint, and nothing else in the final image (the
// preset's single layer holds the binary alone, as distroless/static has no
// shell).
func TestDockerfileInStep(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(raw)
	p := Presets["configstamp"]
	build := regexp.MustCompile(`(?s)RUN CGO_ENABLED=0 .*?go build -trimpath.*?-o configstamp (\S+)`).FindStringSubmatch(df)
	if build == nil {
		t.Fatalf("the Dockerfile no longer builds with CGO_ENABLED=0 and go build -trimpath ... -o configstamp PKG")
	}
	if build[1] != p.Package {
		t.Errorf("the Dockerfile builds %s, the preset %s", build[1], p.Package)
	}
	copyLine := regexp.MustCompile(`COPY --from=builder /workspace/configstamp (\S+)`).FindStringSubmatch(df)
	if copyLine == nil || copyLine[1] != p.Binary {
		t.Errorf("the Dockerfile puts the binary at %v, the preset at %s", copyLine, p.Binary)
	}
	user := regexp.MustCompile(`(?m)^USER (\S+)$`).FindStringSubmatch(df)
	if user == nil || user[1] != p.User {
		t.Errorf("the Dockerfile runs as %v, the preset as %s", user, p.User)
	}
	entry := regexp.MustCompile(`(?m)^ENTRYPOINT \["([^"]+)"\]$`).FindStringSubmatch(df)
	if entry == nil || entry[1] != p.Binary || len(p.Entrypoint) > 0 {
		t.Errorf("the Dockerfile's entrypoint %v, the preset's %v (default: the binary %s)", entry, p.Entrypoint, p.Binary)
	}
	if !strings.Contains(df, "FROM gcr.io/distroless/static") {
		t.Errorf("the Dockerfile's final stage is no longer distroless/static: the preset's binary-only image stands for it no more")
	}
}
