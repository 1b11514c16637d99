package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// ArgoModule is the argo-rollouts release whose CRDs (and, in test/argo,
// controller) the suites run.
const ArgoModule = "github.com/argoproj/argo-rollouts@v1.8.3"

// ArgoKindsFile is the absolute path of the kinds file users apply for Argo
// Rollouts, config/kinds/argo-rollouts/kinds.yaml, checked to exist.
func ArgoKindsFile() (string, error) {
	path, err := filepath.Abs(filepath.Join("..", "..", "config", "kinds", "argo-rollouts", "kinds.yaml"))
	if err != nil {
		return "", err
	}
	_, err = os.Stat(path)
	return path, err
}

// ArgoSource downloads ArgoModule through the Go module proxy, outside
// configstamp's module (whose go.mod and go.sum stay as they are), and
// returns its directory in the module cache.
func ArgoSource(ctx context.Context) (string, error) {
	tmp, err := os.MkdirTemp("", "configstamp-argo-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", ArgoModule)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jsonErr := json.Unmarshal(out, &mod); jsonErr != nil && err == nil {
		err = jsonErr
	}
	if err != nil || mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %w %s\n%s%s", ArgoModule, err, mod.Error, out, stderr.String())
	}
	return mod.Dir, nil
}

// ApplyCRDs applies CRD manifests as a user would, server-side (Argo's files
// are too large for the last-applied annotation): args are kubectl apply's
// file arguments ("-f", file or "-k", dir). It then waits until the CRD
// named established is Established.
func (e *Env) ApplyCRDs(ctx context.Context, established string, args ...string) error {
	if _, stderr, err := e.KubectlErr("", append([]string{"apply", "--server-side"}, args...)...); err != nil {
		return fmt.Errorf("applying %v: %w\n%s", args, err, stderr)
	}
	// `kubectl wait --for=condition=Established` fails while the CRD has no
	// conditions at all yet: poll its status instead.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out, _, err := e.KubectlErr("", "get", "crd", established, "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
		return err == nil && out == "True", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the CRD %s to be Established: %w", established, err)
	}
	// Established comes a moment before discovery serves the kind.
	version, _, err := e.KubectlErr("", "get", "crd", established, "-o", `jsonpath={.spec.versions[?(@.storage==true)].name}`)
	if err != nil {
		return fmt.Errorf("reading the CRD %s: %w", established, err)
	}
	plural, group, _ := strings.Cut(established, ".")
	return e.CP.WaitServed(ctx, group+"/"+strings.TrimSpace(version), plural)
}
