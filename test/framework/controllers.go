package framework

// Other projects' controllers the suites run beside configstamp (Argo
// Rollouts in test/argo, the External Secrets Operator in test/eso): their
// Go module, their binary built once into bin/, their process, their CRDs.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// ModuleSource downloads module ("path@version") through the Go module
// proxy, outside configstamp's module (whose go.mod and go.sum stay as they
// are), and returns its directory in the module cache.
func ModuleSource(ctx context.Context, module string) (string, error) {
	tmp, err := os.MkdirTemp("", "configstamp-module-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
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
		return "", fmt.Errorf("go mod download %s: %w %s\n%s%s", module, err, mod.Error, out, stderr.String())
	}
	return mod.Dir, nil
}

// ControllerBinary is bin/NAME-VERSION, another project's controller,
// built by hack/SCRIPT VERSION BIN when it is missing (cached there).
func (e *Env) ControllerBinary(ctx context.Context, script, name, version string) (string, error) {
	bin := filepath.Join(e.Root, "bin", name+"-"+version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	build := exec.CommandContext(ctx, filepath.Join(e.Root, "hack", script), version, bin)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", name, err, out)
	}
	return bin, nil
}

// StartController runs another project's controller, bin with args, as a
// process of the suite (it dies with it), with the admin kubeconfig in
// KUBECONFIG; its output goes to name.log in the suite's directory (the
// path returned). ports
// free local ports are chosen for its flags (metrics, health) and passed to
// args, which makes them its flags.
func (e *Env) StartController(name, bin string, ports int, args func(ports []string) []string) (string, error) {
	free := make([]string, ports)
	for i := range free {
		p, err := freePort()
		if err != nil {
			return "", err
		}
		free[i] = strconv.Itoa(p)
	}
	log, err := os.Create(filepath.Join(e.Dir(), name+".log"))
	if err != nil {
		return "", err
	}
	ctl := exec.Command(bin, args(free)...)
	ctl.Env = append(os.Environ(), "KUBECONFIG="+e.Kubeconfig)
	ctl.Stdout, ctl.Stderr = log, log
	ctl.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := ctl.Start(); err != nil {
		return "", fmt.Errorf("starting %s: %w", name, err)
	}
	return log.Name(), nil
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
