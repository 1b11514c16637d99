// Package bounds checks configstamp's cost bounds against a real kube-apiserver:
// what one admission may read (kube-apiserver's audit log counts configstamp's
// GETs) and that hostile ConfigMaps (100,000s of keys, 1 MiB of data under a
// user-set "digested" annotation) neither take the process down nor make the
// webhook and the reconciler disagree.
package bounds

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/localcp"
)

// startEnv is framework.Main's start with kube-apiserver's audit log on (the
// framework does not offer it): etcd and kube-apiserver only, configstamp as a
// separate process. stop ends everything.
func startEnv(args ...string) (env *framework.Env, stop func(), err error) {
	root, err := os.Getwd()
	if err != nil {
		return nil, nil, err
	}
	root = filepath.Join(root, "..", "..")
	dir, err := os.MkdirTemp("", "configstamp-bounds-")
	if err != nil {
		return nil, nil, err
	}
	var cp *localcp.ControlPlane
	var proc *framework.Process
	stop = func() {
		if proc != nil {
			proc.Stop()
		}
		if cp != nil {
			_ = cp.Stop()
		}
		if os.Getenv("CONFIGSTAMP_KEEP_TEST_DIR") == "" {
			_ = os.RemoveAll(dir)
		}
	}
	defer func() {
		if err != nil {
			if proc != nil {
				if data, rerr := os.ReadFile(proc.LogPath); rerr == nil {
					fmt.Fprintf(os.Stderr, "--- configstamp log ---\n%s\n", data)
				}
			}
			stop()
		}
	}()
	binary := filepath.Join(dir, "configstamp")
	build := exec.Command("go", "build", "-o", binary, "./cmd")
	build.Dir = root
	if out, berr := build.CombinedOutput(); berr != nil {
		return nil, nil, fmt.Errorf("building configstamp: %w\n%s", berr, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err = localcp.Start(ctx, localcp.Options{Dir: filepath.Join(dir, "cluster"), AuditLog: true,
		Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
	if err != nil {
		return nil, nil, fmt.Errorf("starting the local control plane: %w", err)
	}
	env = &framework.Env{CP: cp, Kubeconfig: cp.KubeconfigPath, Binary: binary, Root: root}
	if env.Config, err = cp.RESTConfig(); err != nil {
		return nil, nil, err
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	if env.Client, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, nil, err
	}
	if err = env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: framework.OwnNamespace}}); err != nil {
		return nil, nil, err
	}
	if proc, err = env.StartConfigstamp(ctx, filepath.Join(dir, "configstamp.log"), args...); err != nil {
		return nil, nil, err
	}
	env.Configstamp = proc
	return env, stop, nil
}
