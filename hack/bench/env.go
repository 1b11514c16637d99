package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/localcp"
)

// benchUserAgent is the benchmark's own user agent; it must not start with
// "configstamp", whose requests are the ones counted.
const benchUserAgent = "stampbench"

// env is one local control plane, the benchmark's clients, and the
// configstamp process running against it.
type env struct {
	cfg         *config
	cp          *localcp.ControlPlane
	rest        *rest.Config
	client      client.Client
	clientset   kubernetes.Interface
	audit       *auditLog // nil unless the control plane writes one
	configstamp *configstampProcess
	windows     []window // scenario time spans, for the request counts
	inventory   inventory
}

// inventory counts what the benchmark created in the cluster.
type inventory struct{ configMaps, secrets, deployments int }

func (i inventory) String() string {
	return fmt.Sprintf("%d ConfigMaps, %d Secrets, %d Deployments", i.configMaps, i.secrets, i.deployments)
}

// startEnv starts a control plane in dir (Full and with an audit log when
// full) and creates configstamp's namespace.
func startEnv(ctx context.Context, cfg *config, dir string, full bool) (*env, error) {
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp, err := localcp.Start(startCtx, localcp.Options{
		Dir: dir, Full: full, AuditLog: full, Profiling: cfg.apiserverCPU, EtcdQuotaBytes: cfg.etcdQuota,
		Logf: func(f string, a ...any) { logf("localcp: "+f, a...) },
	})
	if err != nil {
		return nil, fmt.Errorf("starting the local control plane: %w", err)
	}
	e := &env{cfg: cfg, cp: cp}
	if e.rest, err = cp.RESTConfig(); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	e.rest.UserAgent = benchUserAgent
	e.rest.QPS = float32(cfg.qps)
	e.rest.Burst = int(2 * cfg.qps)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	if e.client, err = client.New(e.rest, client.Options{Scheme: scheme}); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if e.clientset, err = kubernetes.NewForConfig(e.rest); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if path := cp.AuditLogPath(); path != "" {
		e.audit = newAuditLog(path)
	}
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ownNamespace}}); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return e, nil
}

// startConfigstamp starts configstamp with the run's flags; it becomes e.configstamp.
func (e *env) startConfigstamp(ctx context.Context, logName string) (*configstampProcess, error) {
	return e.startConfigstampWith(ctx, logName, e.cfg.configstampArgs)
}

// startConfigstampWith starts configstamp with args; it becomes e.configstamp.
func (e *env) startConfigstampWith(ctx context.Context, logName string, args []string) (*configstampProcess, error) {
	p, err := startConfigstamp(ctx, e.cfg.configstampBin, e.cp.KubeconfigPath,
		filepath.Join(e.cfg.outDir, logName), args)
	if err != nil {
		return nil, err
	}
	e.configstamp = p
	return p, nil
}

// stop ends configstamp and the control plane. Unless keep, the etcd data and
// the audit log go (large); component logs stay.
func (e *env) stop(keep bool) error {
	var errs []error
	if e.configstamp != nil {
		errs = append(errs, e.configstamp.stop())
	}
	errs = append(errs, e.cp.Stop())
	if !keep {
		errs = append(errs, os.RemoveAll(filepath.Join(e.cp.Dir, "etcd")))
		if path := e.cp.AuditLogPath(); path != "" {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// etcdDBSize is the size of etcd's bbolt file (what the quota limits).
func (e *env) etcdDBSize() (int64, error) {
	fi, err := os.Stat(filepath.Join(e.cp.Dir, "etcd", "member", "snap", "db"))
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// apiserverMetrics scrapes kube-apiserver's /metrics with the admin credentials.
func (e *env) apiserverMetrics(ctx context.Context) (samples, error) {
	rc, err := e.clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return parseProm(rc)
}

// window records the time span of a scenario, for request counting.
func (e *env) window(name string, from, to time.Time) {
	e.windows = append(e.windows, window{name: name, from: from, to: to})
}

// windowPer is window whose counts are also shown per unit (n of them).
func (e *env) windowPer(name string, from, to time.Time, n int, unit string) {
	e.windows = append(e.windows, window{name: name, from: from, to: to, per: n, unit: unit})
}

// marker makes a request that the audit log records under the benchmark's user
// agent with a unique name, so the reader knows it has read up to that point.
func (e *env) marker(ctx context.Context, name string) error {
	err := e.client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// finishAudit waits until every request configstamp made has been logged as
// complete (configstamp must be stopped, so its watches end) and adds the
// request counts of every scenario window.
func (e *env) finishAudit(ctx context.Context, res *results) error {
	if e.audit == nil {
		return nil
	}
	seq := 0
	err := poll(ctx, "configstamp's requests to complete in the audit log", time.Minute, 200*time.Millisecond, func() (bool, string, error) {
		seq++
		name := fmt.Sprintf("stampbench-marker-%d", seq)
		if err := e.marker(ctx, name); err != nil {
			return false, "", err
		}
		if err := e.audit.readUntil(ctx, name); err != nil {
			return false, "", err
		}
		open := e.audit.open()
		return open == 0, fmt.Sprintf("%d long-running requests (watches) of configstamp not yet complete", open), nil
	})
	if err != nil {
		return err
	}
	for _, w := range e.windows {
		for _, c := range e.audit.count(w.from, w.to) {
			value := fmt.Sprint(c.n)
			if w.per > 0 {
				value += fmt.Sprintf(" (%.2f per %s)", float64(c.n)/float64(w.per), w.unit)
			}
			res.add(w.name, "configstamp requests: "+c.key, value)
		}
	}
	return nil
}
