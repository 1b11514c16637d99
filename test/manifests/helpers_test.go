package manifests

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/configstamp/configstamp/hack/images"
)

// The overlays and the names they produce. These are the user-visible names of
// an installation; a change here is a change for every user.
const (
	ownNamespace   = "configstamp-system"
	mwcName        = "configstamp-mutating-webhook-configuration"
	webhookService = "configstamp-webhook-service"
	serviceAccount = "configstamp-controller-manager"
	deployment     = "configstamp-controller-manager"
	servingCert    = "configstamp-serving-cert"
	// managerImage is the image config/manager names: the one the release
	// publishes, which make node-images also builds from source.
	managerImage = images.ConfigstampRef
)

// repoRoot is the directory of the module's go.mod (go test runs in the
// package directory, test/manifests).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.Contains(data, []byte("module github.com/configstamp/configstamp\n")) {
		t.Fatalf("%s is not the configstamp module root (go.mod: %v)", root, err)
	}
	return root
}

// binDir is where the Makefile puts tools: $CONFIGSTAMP_BIN (exported by the
// Makefile) or bin/ in the repository.
func binDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("CONFIGSTAMP_BIN"); d != "" {
		return d
	}
	return filepath.Join(repoRoot(t), "bin")
}

// run runs a command in dir and returns its stdout; on failure the test fails
// with stderr.
func run(t *testing.T, dir string, timeout time.Duration, name string, args ...string) []byte {
	t.Helper()
	out, err := tryRun(t, dir, timeout, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tryRun(t *testing.T, dir string, timeout time.Duration, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var notFound *exec.Error
		if errors.As(err, &notFound) {
			return nil, err
		}
		return stdout.Bytes(), &cmdError{cmd: name + " " + strings.Join(args, " "), err: err, stderr: stderr.String()}
	}
	return stdout.Bytes(), nil
}

type cmdError struct {
	cmd, stderr string
	err         error
}

func (e *cmdError) Error() string {
	return e.cmd + ": " + e.err.Error() + "\n" + strings.TrimSpace(e.stderr)
}

func (e *cmdError) Unwrap() error { return e.err }

// rendered is the output of `kubectl kustomize` for one overlay.
type rendered struct {
	raw  []byte
	objs []*unstructured.Unstructured
}

// kustomize renders dir (relative to the repository, or absolute).
func kustomize(t *testing.T, dir string) *rendered {
	t.Helper()
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(repoRoot(t), dir)
	}
	out, err := tryRun(t, dir, time.Minute, "kubectl", "kustomize", ".")
	if err != nil {
		t.Fatalf("rendering %s: %v", dir, err)
	}
	return &rendered{raw: out, objs: decodeAll(t, out)}
}

func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decoding YAML: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// counts returns the number of objects of each kind.
func (r *rendered) counts() map[string]int {
	m := map[string]int{}
	for _, o := range r.objs {
		m[o.GetKind()]++
	}
	return m
}

// all returns the objects of a kind, in render order.
func (r *rendered) all(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// get returns the one object of kind and name, failing the test if there is none.
func (r *rendered) get(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var names []string
	for _, o := range r.all(kind) {
		if o.GetName() == name {
			return o
		}
		names = append(names, o.GetName())
	}
	t.Fatalf("no %s %q in the render (have %v)", kind, name, names)
	return nil
}

// typed converts an unstructured object into T.
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("converting %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

// getAs is get followed by typed.
func getAs[T any](t *testing.T, r *rendered, kind, name string) *T {
	t.Helper()
	return typed[T](t, r.get(t, kind, name))
}

// argValue returns the value of --name=value in args, and whether it is there.
func argValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
