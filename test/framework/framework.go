// Package framework runs configstamp against a real local control plane for the
// integration and end-to-end suites: it starts the control plane once per test
// package (TestMain), builds and runs the configstamp binary as a separate
// process, and offers kubectl and polling helpers. Nothing here sleeps for
// synchronisation: every wait polls a condition with a deadline.
package framework

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/localcp"
)

// OwnNamespace is configstamp's namespace in the suites.
const OwnNamespace = "configstamp-system"

// Env is one control plane and the configstamp process running against it.
type Env struct {
	CP          *localcp.ControlPlane
	Kubeconfig  string
	Config      *rest.Config
	Client      client.Client
	Binary      string
	Root        string
	Configstamp *Process
	// Replicas are every configstamp process of a suite with Config.Replicas
	// > 1 (Configstamp is the first), behind Balancer.
	Replicas []*Process
	Balancer *Balancer
	dir      string
	keep     bool
	// realNode: the control plane runs a real node (Config.Plane).
	realNode bool
	// kinds are the workload kinds whose reconciles WaitIdle and
	// ReconcileCounts read: the built-in kinds and Config.ExtraKinds.
	kinds []string

	// MetricsToken is the bearer token Process.Metrics sends when /metrics is
	// served over HTTPS (--metrics-secure=true): one allowed get on /metrics.
	MetricsToken string

	// ConfigstampKubeconfig is what configstamp runs with: the admin
	// Kubeconfig unless Config.Prepare returns another.
	ConfigstampKubeconfig string
}

// Plane is the kind of control plane a suite runs on: the suites that need
// the same kind share one where their configstamp can be the same (one
// TestMain per kind and configstamp, not per folder).
type Plane int

const (
	// APIServer is etcd and kube-apiserver alone: objects and their
	// generations, no ReplicaSet, no pod.
	APIServer Plane = iota
	// Kwok adds kube-controller-manager, kube-scheduler and kwok: workloads
	// roll (ReplicaSets, ControllerRevisions, pods that run nothing).
	Kwok
	// RealNode runs a real node (kubelet, kube-proxy, containerd, runc)
	// instead of kwok: containers run (localcp.Options.RealNode). Needs
	// Linux, root, `make realnode node-images`. configstamp then runs with
	// its default verification window unless its flags say otherwise.
	RealNode
)

// Config says what a suite runs: the control plane (Plane and the fields up
// to AuditLog), then the configstamp Main starts against it (the rest).
// Every other difference between suites is a configstamp flag in Args.
type Config struct {
	// Plane is the kind of control plane (default APIServer).
	Plane Plane
	// KubeletSyncFrequency is the real node's kubelet syncFrequency (see
	// localcp.Options): a suite that waits for the kubelet to rewrite a
	// mounted ConfigMap or Secret waits less with a shorter one. Default 1m.
	KubeletSyncFrequency time.Duration
	// KwokStages replaces kwok's stage file (see localcp.Options).
	KwokStages string
	// AuditLog makes kube-apiserver write its audit log (localcp.Options.AuditLog),
	// read with Env.AuditEvents: what configstamp asked the API server, not
	// what a test assumes it asked.
	AuditLog bool

	// NoConfigstamp: Main starts no configstamp (Env.Configstamp stays nil);
	// each test starts the processes it needs (Env.Lane, StartConfigstamp).
	NoConfigstamp bool
	// Args are extra configstamp flags, after the framework's (later flags
	// win): e.g. --metrics-secure=true serves /metrics as in a cluster
	// (HTTPS, every scrape authenticated and authorized by the API server;
	// Process.Metrics then sends Env.MetricsToken), --cert-mode=cert-manager
	// with --cert-dir runs in cert-manager mode (no --webhook-url; the
	// process is ready once /healthz answers: readiness depends on the files).
	Args []string
	// HashKey, when set, is stored as configstamp's HMAC key before it starts,
	// so a test can compute the stamps it expects.
	HashKey []byte
	// Replicas runs this many configstamp processes (default 1) sharing one
	// webhook URL, a loopback Balancer in front of their webhook ports, as a
	// Service is in front of a Deployment's pods.
	Replicas int
	// Prepare, when set, is called once the control plane is up and
	// configstamp's namespace exists, before configstamp starts: it creates
	// what configstamp must find at its start (its identity and RBAC, a CRD
	// it reads only when it starts), through e.Client, and returns the
	// kubeconfig configstamp runs with ("": the admin one).
	Prepare func(ctx context.Context, e *Env) (kubeconfig string, err error)
	// ExtraKinds names the extra kinds configstamp runs with (--kinds-config,
	// e.g. "Rollout"): WaitIdle and ReconcileCounts count their reconciles
	// next to the built-in kinds'.
	ExtraKinds []string
}

// Main starts the control plane and configstamp, runs the tests, and stops
// everything. Use from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(framework.Main(m, &env, framework.Config{Plane: framework.Kwok})) }
func Main(m *testing.M, env **Env, cfg Config) int {
	e, err := start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "framework:", err)
		if e != nil {
			e.dumpLogs()
			e.stop()
		}
		return 1
	}
	*env = e
	code := m.Run()
	if code != 0 {
		e.dumpLogs()
		e.keep = true
		fmt.Fprintf(os.Stderr, "framework: logs kept in %s\n", e.dir)
	}
	e.stop()
	return code
}

// ManagerBinary is the configstamp binary a suite runs: the one named by
// $CONFIGSTAMP_TEST_MANAGER (make test builds bin/configstamp once for every
// suite: a link per suite cost each run minutes of CPU on two cores), or
// else one built from the working tree into dir.
func ManagerBinary(root, dir string) (string, error) {
	if bin := os.Getenv("CONFIGSTAMP_TEST_MANAGER"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("$CONFIGSTAMP_TEST_MANAGER: %w", err)
		}
		return bin, nil
	}
	bin := filepath.Join(dir, "configstamp")
	build := exec.Command("go", "build", "-o", bin, "./cmd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building configstamp: %w\n%s", err, out)
	}
	return bin, nil
}

func start(cfg Config) (*Env, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	e := &Env{Root: root, realNode: cfg.Plane == RealNode,
		kinds: append(append([]string{}, builtinKinds...), cfg.ExtraKinds...)}
	dir, err := os.MkdirTemp("", "configstamp-test-")
	if err != nil {
		return nil, err
	}
	e.dir = dir
	if e.Binary, err = ManagerBinary(root, dir); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if e.realNode { // the real-node lock may be held by another suite for a while
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
	}
	e.CP, err = localcp.Start(ctx, localcp.Options{Dir: filepath.Join(dir, "cluster"), Full: cfg.Plane != APIServer, RealNode: e.realNode, KwokStages: cfg.KwokStages,
		KubeletSyncFrequency: cfg.KubeletSyncFrequency, AuditLog: cfg.AuditLog, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
	if err != nil {
		return e, fmt.Errorf("starting the local control plane: %w", err)
	}
	e.Kubeconfig = e.CP.KubeconfigPath
	if e.Config, err = e.CP.RESTConfig(); err != nil {
		return e, err
	}
	if err := checkServerVersion(e.Config, os.Getenv("CONFIGSTAMP_K8S_VERSION")); err != nil {
		return e, err
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	if e.Client, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
		return e, err
	}
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OwnNamespace}}); err != nil {
		return e, err
	}
	if cfg.HashKey != nil {
		key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: OwnNamespace, Name: "configstamp-hash-key"},
			Data: map[string][]byte{"key": cfg.HashKey}}
		if err := e.Client.Create(ctx, key); err != nil {
			return e, err
		}
	}
	e.ConfigstampKubeconfig = e.Kubeconfig
	if cfg.Prepare != nil {
		kubeconfig, err := cfg.Prepare(ctx, e)
		if err != nil {
			return e, fmt.Errorf("preparing for configstamp: %w", err)
		}
		if kubeconfig != "" {
			e.ConfigstampKubeconfig = kubeconfig
		}
	}
	if cfg.NoConfigstamp {
		return e, nil
	}
	if cfg.Replicas <= 1 {
		e.Configstamp, err = e.StartConfigstamp(ctx, filepath.Join(dir, "configstamp.log"), cfg.Args...)
		return e, err
	}
	if e.Balancer, err = NewBalancer(); err != nil {
		return e, err
	}
	for i := range cfg.Replicas {
		p, err := e.newProcess(filepath.Join(dir, fmt.Sprintf("configstamp-%d.log", i)), cfg.Args)
		if err != nil {
			return e, err
		}
		p.webhookURL = "https://" + e.Balancer.Addr()
		if err := e.proxyAPI(p, i); err != nil {
			return e, err
		}
		e.Replicas = append(e.Replicas, p)
	}
	e.Configstamp = e.Replicas[0]
	addrs := make([]string, len(e.Replicas))
	for i, p := range e.Replicas {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", p.WebhookPort)
	}
	e.Balancer.SetBackends(addrs...)
	for _, p := range e.Replicas {
		if err := p.start(ctx); err != nil {
			return e, err
		}
	}
	return e, nil
}

// checkServerVersion logs the API server's version and, when want is set
// ($CONFIGSTAMP_K8S_VERSION, e.g. "v1.30.14" from make test-compat), fails
// unless the API server reports exactly that version: a suite meant for an
// older Kubernetes never passes against the default binaries by mistake.
func checkServerVersion(cfg *rest.Config, want string) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the API server's version: %w", err)
	}
	fmt.Fprintf(os.Stderr, "framework: Kubernetes %s\n", v.GitVersion)
	if want != "" && v.GitVersion != want {
		return fmt.Errorf("the API server is Kubernetes %s, not %s as CONFIGSTAMP_K8S_VERSION says (CONFIGSTAMP_K8S_BIN=%q)",
			v.GitVersion, want, os.Getenv("CONFIGSTAMP_K8S_BIN"))
	}
	return nil
}

// Dir is the suite's directory: the binary, the control plane and the logs,
// kept when a test fails.
func (e *Env) Dir() string { return e.dir }

func (e *Env) stop() {
	for _, p := range e.Replicas {
		p.Stop()
	}
	if e.Configstamp != nil {
		e.Configstamp.Stop()
	}
	if e.Balancer != nil {
		e.Balancer.Close()
	}
	if e.CP != nil {
		_ = e.CP.Stop()
	}
	if e.dir != "" && !e.keep && os.Getenv("CONFIGSTAMP_KEEP_TEST_DIR") == "" {
		_ = os.RemoveAll(e.dir)
	}
}

func (e *Env) dumpLogs() {
	if e.Configstamp == nil {
		return
	}
	data, err := os.ReadFile(e.Configstamp.LogPath)
	if err != nil {
		return
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	fmt.Fprintf(os.Stderr, "--- last lines of %s ---\n%s\n", e.Configstamp.LogPath, strings.Join(lines, "\n"))
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if data, _ := os.ReadFile(filepath.Join(dir, "go.mod")); bytes.Contains(data, []byte("module github.com/configstamp/configstamp\n")) {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("repository root not found above %s", dir)
		}
		dir = parent
	}
}

// Process is a running configstamp.
type Process struct {
	cmd         *exec.Cmd
	done        chan struct{}
	LogPath     string
	WebhookPort int
	// webhookURL, when set, is the --webhook-url (a Balancer in front of
	// several replicas); the webhook then binds 127.0.0.1:WebhookPort.
	webhookURL  string
	ProbeAddr   string
	MetricsAddr string
	args        []string
	env         *Env
	// secureMetrics: the running process serves /metrics over HTTPS with
	// authentication (its --metrics-secure, as last given).
	secureMetrics bool
	client        *http.Client
	// API, for each of several replicas, is the proxy its API server traffic
	// passes (a fault may Cut it); SourceIP the address the API server sees
	// its requests come from. kubeconfig, when set, points at API.
	API        *Balancer
	SourceIP   string
	kubeconfig string
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartConfigstamp runs the binary with the design's out-of-cluster flags on
// free loopback ports and waits until /readyz answers.
func (e *Env) StartConfigstamp(ctx context.Context, logPath string, extra ...string) (*Process, error) {
	p, err := e.newProcess(logPath, extra)
	if err != nil {
		return nil, err
	}
	return p, p.start(ctx)
}

// newProcess prepares a configstamp process on free loopback ports.
func (e *Env) newProcess(logPath string, extra []string) (*Process, error) {
	p := &Process{
		LogPath: logPath,
		args:    extra, env: e,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			// The metrics server's certificate is self-signed, made in memory.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		}},
	}
	return p, p.freshPorts()
}

// start runs the process until it is ready. Its ports were free when
// newProcess picked them, but another process (a client connection's source
// port, another suite's server) may take one before configstamp binds it:
// then it starts again on fresh ports, at most three times. Any other early
// exit is an error that quotes the end of the process's log.
func (p *Process) start(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := p.startOnce(ctx)
		if err == nil || !errors.Is(err, errExitedEarly) {
			return err
		}
		tail := p.logTail(20)
		if attempt == 3 || !strings.Contains(tail, "address already in use") {
			return fmt.Errorf("%w; last lines of %s:\n%s", err, p.LogPath, tail)
		}
		if err := p.freshPorts(); err != nil {
			return err
		}
	}
}

// errExitedEarly: the process ended before it was ready.
var errExitedEarly = errors.New("configstamp exited early")

// logTail returns the last n lines of the process's log.
func (p *Process) logTail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freshPorts picks new free ports for the webhook, probe and metrics servers.
func (p *Process) freshPorts() error {
	var ports [3]int
	for i := range ports {
		port, err := freePort()
		if err != nil {
			return err
		}
		ports[i] = port
	}
	p.WebhookPort = ports[0]
	p.ProbeAddr = "127.0.0.1:" + strconv.Itoa(ports[1])
	p.MetricsAddr = "127.0.0.1:" + strconv.Itoa(ports[2])
	return nil
}

func (p *Process) startOnce(ctx context.Context) error {
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	mode, probe := []string{"--cert-mode=self", fmt.Sprintf("--webhook-url=https://127.0.0.1:%d", p.WebhookPort)}, "/readyz"
	if p.webhookURL != "" {
		mode = []string{"--cert-mode=self", "--webhook-url=" + p.webhookURL, "--webhook-host=127.0.0.1"}
	}
	if lastValue(p.args, "cert-mode") == "cert-manager" {
		// The suite's --cert-dir holds the files; no URL to register.
		mode, probe = []string{"--webhook-host=127.0.0.1"}, "/healthz"
	}
	// The metrics address is on loopback: plain HTTP without authentication
	// unless the suite's flags ask for the in-cluster setting.
	mode = append(mode, "--metrics-secure=false")
	if !p.env.realNode {
		// kwok's pods run nothing: no container can crash or lose its
		// readiness there, so a verification window would only hold every
		// slot longer. The window is tested where containers run (RealNode);
		// a suite may still pass --verify-window.
		mode = append(mode, "--verify-window=0s")
	}
	kubeconfig := p.kubeconfig
	if kubeconfig == "" {
		kubeconfig = p.env.configstampKubeconfig()
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig, "--namespace=" + OwnNamespace,
		fmt.Sprintf("--webhook-port=%d", p.WebhookPort),
		"--health-probe-bind-address=" + p.ProbeAddr, "--metrics-bind-address=" + p.MetricsAddr,
		// A process here is behind no Service: nothing to drain on SIGTERM.
		"--graceful-shutdown-timeout=5s", "--shutdown-delay=0s",
	}, append(mode, p.args...)...)
	p.secureMetrics = metricsSecure(args)
	metricsAddr := lastValue(args, "metrics-bind-address")
	p.cmd = exec.Command(p.env.Binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		_ = logFile.Close()
		return err
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, errExitedEarly
		default:
		}
		resp, err := http.Get("http://" + p.ProbeAddr + probe)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, nil
		}
		// The metrics server may start listening after /readyz answers (over
		// HTTPS it first makes its certificate and the API server clients).
		if metricsAddr == "0" {
			return true, nil
		}
		conn, err := net.DialTimeout("tcp", metricsAddr, time.Second)
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for configstamp %s: %w", probe, err)
	}
	return nil
}

// proxyAPI puts replica i's API server traffic through a proxy of its own,
// from the loopback address 127.0.0.(11+i): a fault can cut that replica off,
// and the audit log tells the replicas' requests apart (AuditEvent.SourceIPs).
func (e *Env) proxyAPI(p *Process, i int) error {
	from := net.IPv4(127, 0, 0, byte(11+i))
	proxy, err := NewProxy(strings.TrimPrefix(e.CP.APIServerURL, "https://"), from)
	if err != nil {
		return err
	}
	kc, err := clientcmd.LoadFromFile(e.configstampKubeconfig())
	if err != nil {
		return err
	}
	for _, cluster := range kc.Clusters {
		cluster.Server = "https://" + proxy.Addr()
	}
	p.API, p.SourceIP = proxy, from.String()
	p.kubeconfig = strings.TrimSuffix(p.LogPath, ".log") + ".kubeconfig"
	return clientcmd.WriteToFile(*kc, p.kubeconfig)
}

func (e *Env) configstampKubeconfig() string {
	if e.ConfigstampKubeconfig != "" {
		return e.ConfigstampKubeconfig
	}
	return e.Kubeconfig
}

// Stop terminates the process (SIGTERM, then SIGKILL after 10 s) and waits.
func (p *Process) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Restart stops and starts configstamp with the same flags.
func (p *Process) Restart(ctx context.Context) error {
	p.Stop()
	return p.start(ctx)
}

// RestartWith stops configstamp and starts it with the suite's flags plus extra
// (later flags win).
func (p *Process) RestartWith(ctx context.Context, extra ...string) error {
	p.Stop()
	base := p.args
	p.args = append(append([]string{}, base...), extra...)
	defer func() { p.args = base }()
	return p.start(ctx)
}

// Exited reports whether the process has ended (a crash, a lost leader
// election, Kill or Stop).
func (p *Process) Exited() bool {
	if p.done == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill ends configstamp with SIGKILL, as a crash or a node loss would: no
// graceful shutdown, no lease release.
func (p *Process) Kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Start starts configstamp again (after Kill or Stop) with the suite's flags plus extra.
func (p *Process) Start(ctx context.Context, extra ...string) error {
	base := p.args
	p.args = append(append([]string{}, base...), extra...)
	defer func() { p.args = base }()
	return p.start(ctx)
}

// lastValue is the value of the last --name=value in args ("" without one).
func lastValue(args []string, name string) string {
	v := ""
	for _, a := range args {
		if rest, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), name+"="); ok {
			v = rest
		}
	}
	return v
}

// metricsSecure is the value of the last --metrics-secure in args (the
// binary's default, true, without one).
func metricsSecure(args []string) bool {
	secure := true
	for _, a := range args {
		switch a {
		case "--metrics-secure", "-metrics-secure", "--metrics-secure=true", "-metrics-secure=true":
			secure = true
		case "--metrics-secure=false", "-metrics-secure=false":
			secure = false
		}
	}
	return secure
}

// AssertNoneRefused fails the test when p's log mentions a refused
// (Forbidden) request: configstamp ran under an identity that lacked a
// right it used. what names that identity's RBAC in the message.
func (p *Process) AssertNoneRefused(t testing.TB, what string) {
	t.Helper()
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	errorLines := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			refused = append(refused, line)
		}
		if strings.Contains(line, `"level":"error"`) {
			errorLines++
		}
	}
	t.Logf("configstamp's log: %d lines at level error, %d mentioning forbidden", errorLines, len(refused))
	if len(refused) > 0 {
		t.Fatalf("configstamp was refused requests under %s:\n%s", what, strings.Join(refused[:min(10, len(refused))], "\n"))
	}
}

// MetricsURL is where the running process serves /metrics.
func (p *Process) MetricsURL() string {
	if p.secureMetrics {
		return "https://" + p.MetricsAddr + "/metrics"
	}
	return "http://" + p.MetricsAddr + "/metrics"
}

// Metrics scrapes /metrics and returns the sum of the samples of family whose
// labels contain every given name="value" pair. Over HTTPS (--metrics-secure=true)
// it sends Env.MetricsToken; the server's certificate is self-signed.
func (p *Process) Metrics(family string, labels ...string) (float64, error) {
	req, err := http.NewRequest(http.MethodGet, p.MetricsURL(), nil)
	if err != nil {
		return 0, err
	}
	if p.secureMetrics {
		if p.env.MetricsToken == "" {
			return 0, fmt.Errorf("scraping %s: /metrics is served securely and Env.MetricsToken is empty", p.MetricsURL())
		}
		req.Header.Set("Authorization", "Bearer "+p.env.MetricsToken)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scraping %s: %s", p.MetricsURL(), resp.Status)
	}
	return sumSamples(resp.Body, family, labels)
}

func sumSamples(r io.Reader, family string, labels []string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, family) {
			continue
		}
		rest := line[len(family):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		matched := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				matched = false
			}
		}
		if !matched {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, sc.Err()
}

// WaitIdle waits until configstamp has reconciled workloads of every kind
// named in `since` (from ReconcileCounts) more than it had then, the workload
// controller's queue is empty and none of its workers busy, and the
// scheduler holds nothing pending (configstamp_rollouts_pending: no workload
// debouncing, waiting for a slot, or announced and not yet reconciled): the
// point where configstamp has acted on everything it was told before. Work
// queues alone do not show reconciles waiting on RequeueAfter (a debounce
// window): a "nothing rolled" check needs the scheduler to be empty too.
func (p *Process) WaitIdle(t testing.TB, since map[string]float64) {
	t.Helper()
	Eventually(t, 60*time.Second, func() (bool, string) {
		now := p.ReconcileCounts(t)
		for name, before := range since {
			if now[name] <= before {
				return false, fmt.Sprintf("%s workloads reconciled %v times, waiting for more than %v", name, now[name], before)
			}
		}
		if pending, err := p.Metrics("configstamp_rollouts_pending"); err != nil || pending != 0 {
			return false, fmt.Sprintf("%v workloads pending in the scheduler (%v)", pending, err)
		}
		depth, err := p.Metrics("workqueue_depth", `name="`+workloadController+`"`)
		if err != nil || depth != 0 {
			return false, fmt.Sprintf("queue %s depth %v (%v)", workloadController, depth, err)
		}
		busy, err := p.Metrics("controller_runtime_active_workers", `controller="`+workloadController+`"`)
		if err != nil || busy != 0 {
			return false, fmt.Sprintf("controller %s has %v active workers (%v)", workloadController, busy, err)
		}
		return true, ""
	})
}

// builtinKinds are the workload kinds configstamp always handles.
var builtinKinds = []string{"Deployment", "StatefulSet", "DaemonSet"}

// workloadController is the name of configstamp's one workload controller
// (controllers.ControllerName): its queue holds the workloads of every kind.
const workloadController = "workload"

// ReconcileCounts returns configstamp_reconciles_total per kind, keyed by the
// kind's name in lower case ("deployment", "rollout").
func (p *Process) ReconcileCounts(t testing.TB) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, kind := range p.env.kinds {
		v, err := p.Metrics("configstamp_reconciles_total", `kind="`+kind+`"`)
		if err != nil {
			t.Fatalf("scraping configstamp metrics: %v", err)
		}
		out[strings.ToLower(kind)] = v
	}
	return out
}

// Eventually polls cond every 100 ms until it holds or timeout passes; on
// timeout the test fails with cond's last explanation.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for {
		var ok bool
		ok, why = cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %s", timeout, why)
		}
		<-time.After(100 * time.Millisecond)
	}
}

// Kubectl runs kubectl against the env's cluster with stdin and returns stdout
// and stderr; a failure fails the test.
func (e *Env) Kubectl(t testing.TB, stdin string, args ...string) (string, string) {
	t.Helper()
	stdout, stderr, err := e.KubectlErr(stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return stdout, stderr
}

// KubectlErr is Kubectl returning the error instead of failing.
func (e *Env) KubectlErr(stdin string, args ...string) (string, string, error) {
	return KubectlAs(e.Kubeconfig, stdin, args...)
}

// MustKubectlAs is KubectlAs failing t when kubectl fails; it returns stdout.
func MustKubectlAs(t testing.TB, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := KubectlAs(kubeconfig, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl (as %s) %s: %v\n%s", kubeconfig, strings.Join(args, " "), err, errOut)
	}
	return out
}

// KubectlAs runs kubectl with kubeconfig (a tenant's: Env.Tenant) and stdin,
// and returns stdout, stderr and its error.
func KubectlAs(kubeconfig, stdin string, args ...string) (string, string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// Namespace creates a namespace with a random suffix (and labels) for one test.
func (e *Env) Namespace(t testing.TB, prefix string, labels map[string]string) string {
	t.Helper()
	name := prefix + "-" + rand.String(5)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := e.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// WebhookFailOpen is kube-apiserver's count of calls to configstamp's
// webhooks (named *.configstamp.io) that failed and were let through
// (failurePolicy Ignore): apiserver_admission_webhook_fail_open_count.
func (e *Env) WebhookFailOpen(t testing.TB) float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	Eventually(t, time.Minute, func() (bool, string) {
		raw, err = cs.RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
		return err == nil, fmt.Sprintf("reading kube-apiserver metrics: %v", err)
	})
	return SumSamples(string(raw), "apiserver_admission_webhook_fail_open_count", `.configstamp.io"`)
}

// SumSamples sums the samples of family in a Prometheus text exposition whose
// labels contain every given name="value" pair (0 when there are none).
func SumSamples(text, family string, labels ...string) float64 {
	v, _ := sumSamples(strings.NewReader(text), family, labels)
	return v
}
