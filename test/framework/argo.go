package framework

import (
	"context"
	"os"
	"path/filepath"
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

// ArgoSource downloads ArgoModule (ModuleSource) and returns its directory.
func ArgoSource(ctx context.Context) (string, error) { return ModuleSource(ctx, ArgoModule) }
