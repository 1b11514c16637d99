// Package scope runs configstamp installations scoped to namespaces against a
// real local control plane (kube-controller-manager, scheduler and kwok too,
// so Deployments really roll) whose kube-apiserver writes an audit log: what
// configstamp lists and watches is read from it, not assumed.
package scope

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

var (
	env *framework.Env
	dir string
)

// start is framework.Main's start with kube-apiserver's audit log on (the
// framework does not offer it) and no configstamp: every test starts the
// installations it needs (startConfigstamp).
func start() (func(), error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return nil, err
	}
	if dir, err = os.MkdirTemp("", "configstamp-scope-"); err != nil {
		return nil, err
	}
	env = &framework.Env{Root: root, Binary: filepath.Join(dir, "configstamp")}
	stop := func() {
		if env.CP != nil {
			_ = env.CP.Stop()
		}
		if os.Getenv("CONFIGSTAMP_KEEP_TEST_DIR") == "" {
			_ = os.RemoveAll(dir)
		}
	}
	build := exec.Command("go", "build", "-o", env.Binary, "./cmd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return stop, fmt.Errorf("building configstamp: %w\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env.CP, err = localcp.Start(ctx, localcp.Options{Dir: filepath.Join(dir, "cluster"), Full: true, AuditLog: true,
		Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
	if err != nil {
		return stop, fmt.Errorf("starting the local control plane: %w", err)
	}
	env.Kubeconfig = env.CP.KubeconfigPath
	if env.Config, err = env.CP.RESTConfig(); err != nil {
		return stop, err
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	if env.Client, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		return stop, err
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: framework.OwnNamespace}}); err != nil {
		return stop, err
	}
	return stop, nil
}
