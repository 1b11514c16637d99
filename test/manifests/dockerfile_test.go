package manifests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, COPY, RUN, ...
	args string
	line int
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.Join(strings.Fields(args), " "), line: start})
		cur.Reset()
	}
	return out
}

// stage is one FROM … section.
type stage struct {
	image, name string
	ins         []instruction
}

func stages(ins []instruction) []stage {
	var out []stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			out = append(out, s)
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].ins = append(out[len(out)-1].ins, in)
		}
	}
	return out
}

func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	st := stages(parseDockerfile(t, filepath.Join(root, "Dockerfile")))
	if len(st) != 2 {
		t.Fatalf("%d stages, want 2 (builder and runtime)", len(st))
	}
	builder, final := st[0], st[1]
	if builder.image != "golang:1.26" || builder.name == "" {
		t.Errorf("builder stage FROM %s AS %q, want golang:1.26 with a name", builder.image, builder.name)
	}
	if final.image != "gcr.io/distroless/static:nonroot" {
		t.Errorf("runtime stage FROM %s, want gcr.io/distroless/static:nonroot", final.image)
	}

	// Builder: go.mod/go.sum copied and downloaded before any source, so the
	// module layer is cached across source edits.
	find := func(s stage, match func(instruction) bool) int {
		return slices.IndexFunc(s.ins, match)
	}
	modCopy := find(builder, func(in instruction) bool { return in.cmd == "COPY" && in.args == "go.mod go.sum ./" })
	download := find(builder, func(in instruction) bool { return in.cmd == "RUN" && strings.Contains(in.args, "go mod download") })
	build := find(builder, func(in instruction) bool { return in.cmd == "RUN" && strings.Contains(in.args, "go build") })
	var sources []string
	firstSource := -1
	for i, in := range builder.ins {
		if in.cmd == "COPY" && i != modCopy {
			f := strings.Fields(in.args)
			if strings.HasPrefix(f[0], "--") {
				t.Errorf("line %d: builder COPY with flags: %s", in.line, in.args)
				continue
			}
			sources = append(sources, f[:len(f)-1]...)
			if firstSource < 0 {
				firstSource = i
			}
		}
	}
	if modCopy < 0 || download < 0 || firstSource < 0 || build < 0 || modCopy >= download || download >= firstSource || firstSource >= build {
		t.Errorf("builder order: COPY go.mod go.sum (%d), go mod download (%d), source COPY (%d), go build (%d): want increasing",
			modCopy, download, firstSource, build)
	}
	if build >= 0 {
		args := builder.ins[build].args
		for _, want := range []string{"CGO_ENABLED=0", "go build", "-trimpath", "-o configstamp", "./cmd"} {
			if !strings.Contains(args, want) {
				t.Errorf("build step %q lacks %q", args, want)
			}
		}
	}
	checkSourcesCover(t, root, sources)

	// Runtime: the binary only, a numeric non-root user, exec-form entrypoint.
	var user, entrypoint string
	copied := false
	for _, in := range final.ins {
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			copied = copied || in.args == "--from="+builder.name+" /workspace/configstamp /configstamp"
		case "RUN":
			t.Errorf("line %d: RUN in the distroless stage (no shell there)", in.line)
		}
	}
	if !copied {
		t.Errorf("runtime stage does not COPY --from=%s /workspace/configstamp /configstamp", builder.name)
	}
	uid, gid, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric non-root uid (the kubelet verifies runAsNonRoot only for numeric users)", user)
	}
	if n, err := strconv.Atoi(gid); gid != "" && (err != nil || n == 0) {
		t.Errorf("USER %q: want a numeric non-root gid", user)
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || !slices.Equal(ep, []string{"/configstamp"}) {
		t.Errorf(`ENTRYPOINT %s, want ["/configstamp"] (exec form)`, entrypoint)
	}
}

// checkSourcesCover fails when the builder's COPY list misses a package that
// ./cmd needs (a new package directory would break `docker build`, which no
// test here can run), or when .dockerignore hides one of them.
func checkSourcesCover(t *testing.T, root string, sources []string) {
	t.Helper()
	const module = "github.com/configstamp/configstamp"
	out := run(t, root, 2*time.Minute, "go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./cmd")
	dirs := []string{"go.mod", "go.sum"}
	for _, p := range strings.Fields(string(out)) {
		if rel, ok := strings.CutPrefix(p, module+"/"); ok {
			dirs = append(dirs, rel)
		}
	}
	for _, d := range dirs[2:] {
		covered := slices.ContainsFunc(sources, func(s string) bool {
			s = strings.TrimSuffix(strings.TrimPrefix(s, "./"), "/")
			return s == "." || d == s || strings.HasPrefix(d, s+"/")
		})
		if !covered {
			t.Errorf("package directory %s (needed by ./cmd) is not copied by the Dockerfile (copies %v)", d, sources)
		}
	}

	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimSuffix(strings.TrimPrefix(line, "/"), "/"))
		}
	}
	for _, want := range []string{".git", "bin", "_output", "test"} {
		if !slices.Contains(patterns, want) {
			t.Errorf(".dockerignore does not exclude %s (patterns %v)", want, patterns)
		}
	}
	for _, d := range dirs {
		for _, p := range patterns {
			if strings.HasPrefix(p, "!") || strings.Contains(p, "**") {
				continue
			}
			if ok, _ := filepath.Match(p, d); ok || strings.HasPrefix(d, p+"/") {
				t.Errorf(".dockerignore pattern %q hides %s, which the build needs", p, d)
			}
		}
	}
}
