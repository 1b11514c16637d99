// Package localcp runs a real Kubernetes control plane on loopback: etcd and
// kube-apiserver, and optionally kube-controller-manager, kube-scheduler and
// kwok with one fake node, from the binaries built by `make controlplane`
// (hack/controlplane.mk). With Options.RealNode it runs a real node instead
// (kubelet, kube-proxy, containerd, runc and a CNI bridge; see node.go). It is
// used by integration and end-to-end tests, benchmarks and the demo (through
// the hack/localcp CLI).
package localcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// NodeName is the fake node that kwok manages in a Full control plane.
	NodeName = "kwok-node-0"
	// kwokAnnotation marks the nodes kwok manages (--manage-nodes-with-annotation-selector).
	kwokAnnotation = "kwok.x-k8s.io/node"

	etcdBin       = "etcd"
	apiserverBin  = "kube-apiserver"
	kcmBin        = "kube-controller-manager"
	schedulerBin  = "kube-scheduler"
	kwokBin       = "kwok"
	kwokStages    = "kwok-stages.yaml"
	stopGrace     = 5 * time.Second
	startAttempts = 3 // on port clashes with other control planes
)

// ErrBinariesMissing is returned (wrapped) by Start when BinDir lacks a binary.
var ErrBinariesMissing = errors.New("control plane binaries missing")

// ErrNotRunning is returned (wrapped) by Attach when no healthy control plane
// was started in the directory.
var ErrNotRunning = errors.New("no running control plane")

// Options configure Start. The zero value is valid.
type Options struct {
	// BinDir holds the binaries. Default: $CONFIGSTAMP_BIN, else bin/ next to
	// the go.mod of github.com/configstamp/configstamp found from the working
	// directory upwards.
	BinDir string
	// K8sBinDir holds the Kubernetes binaries (kube-apiserver,
	// kube-controller-manager, kube-scheduler; kubelet and kube-proxy with
	// RealNode) when they come from another Kubernetes version than BinDir's,
	// as `make test-compat` runs the suites against the oldest supported one
	// (bin/k8s-1.30). etcd, kwok and its stages stay BinDir's. Default:
	// $CONFIGSTAMP_K8S_BIN, else BinDir.
	K8sBinDir string
	// Dir is the state directory (certificates, etcd data, kubeconfig, logs,
	// pids). Default: a new temporary directory, removed by Stop. An existing
	// directory is reused but the cluster is always fresh: components a
	// previous Start left running there are stopped and etcd data is wiped.
	Dir string
	// Full adds kube-controller-manager, kube-scheduler and kwok with one fake
	// node (NodeName) that is Ready and schedulable when Start returns.
	// Without it only etcd and kube-apiserver run.
	Full bool
	// RealNode implies Full but runs a real node, RealNodeName, instead of
	// kwok's fake one: containerd (with runc and a CNI bridge), kubelet and
	// kube-proxy, so pods run real containers. Linux and root only; needs
	// `make realnode node-images`. Only one real node runs on a machine at a
	// time: Start waits (within ctx) for the one of another process to stop.
	// The API server then listens on the bridge address (RealNodeAPIAddress)
	// only, not on 127.0.0.1, so that pods reach it; APIServerURL and the
	// kubeconfig point there. See node.go.
	RealNode bool
	// KubeletSyncFrequency is the real node's kubelet syncFrequency: how
	// often it resyncs each pod, which is when it rewrites the files of a
	// mounted ConfigMap or Secret that changed (after up to half as long
	// again: the kubelet adds jitter). Default: the kubelet's, 1m.
	KubeletSyncFrequency time.Duration
	// EtcdQuotaBytes is etcd's --quota-backend-bytes. Default 8 GiB.
	EtcdQuotaBytes int64
	// KwokStages replaces kwok's stage file (default BinDir/kwok-stages.yaml),
	// e.g. to keep chosen pods unready in a test.
	KwokStages string
	// Detach starts the components in their own session, without the
	// parent-death signal, so they outlive the calling process (hack/localcp up).
	Detach bool
	// AuditLog makes kube-apiserver write a JSON audit log of every request
	// at level Metadata (stage RequestReceived omitted) to AuditLogPath(), for
	// benchmarks that count requests by user agent.
	AuditLog bool
	// Profiling serves kube-apiserver's /debug/pprof (--profiling), for
	// benchmarks that profile it.
	Profiling bool
	// Logf receives progress lines. Default: discard.
	Logf func(format string, args ...any)
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	Dir            string // state directory
	KubeconfigPath string // admin kubeconfig (client certificate, system:masters)
	APIServerURL   string // https://127.0.0.1:<port>; with RealNode https://RealNodeAPIAddress:<port>
	Full           bool   // runs kube-controller-manager, kube-scheduler and kwok or a real node
	RealNode       bool   // runs a real node (RealNodeName) instead of kwok

	binDir string
	// k8sBinDir holds the Kubernetes components (Options.K8sBinDir).
	k8sBinDir string
	stages    string
	auditLog  bool
	// profiling: kube-apiserver serves /debug/pprof.
	profiling bool
	detach    bool
	ownsDir   bool
	logf      func(string, ...any)
	procs     []*process
	pki       *pki
	etcdURL   string
	stopOnce  sync.Once
	stopErr   error
	node      nodeState // real node only
}

// Start starts a fresh control plane and returns once it is usable: the API
// server is ready with RBAC bootstrapped and, if Full, the fake node is Ready
// and untainted and the default ServiceAccount exists. ctx bounds only the
// start-up; call Stop to end the processes. On error everything started is
// stopped again.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	began := time.Now()
	if opts.RealNode {
		opts.Full = true
	}
	c := &ControlPlane{Full: opts.Full, detach: opts.Detach, logf: opts.Logf, auditLog: opts.AuditLog, profiling: opts.Profiling,
		node: nodeState{syncFrequency: opts.KubeletSyncFrequency}}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	if err := c.init(opts); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
		}
	}()
	var extraIPs []net.IP
	if opts.RealNode {
		// Before the API server: it binds to the bridge's address. Sets
		// c.RealNode once it holds the machine's real-node lock.
		if err := c.prepareRealNode(ctx); err != nil {
			return nil, err
		}
		extraIPs = append(extraIPs, net.ParseIP(RealNodeAPIAddress))
	}
	p, err := writePKI(filepath.Join(c.Dir, "pki"), extraIPs...)
	if err != nil {
		return nil, fmt.Errorf("writing certificates: %w", err)
	}
	c.pki = p
	quota := opts.EtcdQuotaBytes
	if quota <= 0 {
		quota = 8 << 30
	}
	for attempt := 1; ; attempt++ {
		err = c.startCore(ctx, quota)
		if err == nil {
			break
		}
		if attempt == startAttempts || !portClash(err) {
			return nil, err
		}
		c.logf("port clash (%v), retrying with new ports", err)
		if err := c.stopProcs(stopGrace); err != nil {
			return nil, err
		}
	}
	cs, err := c.clientset()
	if err != nil {
		return nil, err
	}
	if err := c.waitFor(ctx, "RBAC bootstrap and default namespace", time.Minute, func(ctx context.Context) error {
		if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "cluster-admin", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if opts.Full {
		if err := c.startNodeComponents(ctx, cs); err != nil {
			return nil, err
		}
	}
	ok = true
	c.logf("control plane ready in %s: export KUBECONFIG=%s", time.Since(began).Round(time.Millisecond), c.KubeconfigPath)
	return c, nil
}

// init resolves the binary and state directories.
func (c *ControlPlane) init(opts Options) error {
	var err error
	c.binDir = opts.BinDir
	if c.binDir == "" {
		if c.binDir, err = defaultBinDir(); err != nil {
			return err
		}
	}
	c.stages = opts.KwokStages
	if c.stages == "" {
		c.stages = filepath.Join(c.binDir, kwokStages)
	}
	if c.binDir, err = filepath.Abs(c.binDir); err != nil { // components run in Dir
		return err
	}
	c.k8sBinDir = opts.K8sBinDir
	if c.k8sBinDir == "" {
		c.k8sBinDir = os.Getenv("CONFIGSTAMP_K8S_BIN")
	}
	if c.k8sBinDir == "" {
		c.k8sBinDir = c.binDir
	}
	if c.k8sBinDir, err = filepath.Abs(c.k8sBinDir); err != nil {
		return err
	}
	bins := []string{etcdBin, apiserverBin}
	switch {
	case opts.RealNode:
		bins = append(bins, kcmBin, schedulerBin, kubeletBin, kubeProxyBin)
	case opts.Full:
		bins = append(bins, kcmBin, schedulerBin, kwokBin, kwokStages)
	}
	missing := map[string][]string{}
	for _, b := range bins {
		dir := c.binDir
		if isK8sComponent(b) {
			dir = c.k8sBinDir
		}
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			missing[dir] = append(missing[dir], b)
		}
	}
	if len(missing) > 0 {
		var msgs []string
		for _, dir := range []string{c.binDir, c.k8sBinDir} {
			if m := missing[dir]; len(m) > 0 {
				msgs = append(msgs, fmt.Sprintf("%s not in %s", strings.Join(m, ", "), dir))
				delete(missing, dir)
			}
		}
		hint := "make controlplane"
		if c.k8sBinDir != c.binDir {
			hint += `" (and for the other Kubernetes version "make controlplane-compat`
		}
		return fmt.Errorf(`%w: %s; run "%s"`, ErrBinariesMissing, strings.Join(msgs, "; "), hint)
	}
	if opts.RealNode {
		if c.node.cgroupMode, err = checkNodeHost(c.binDir); err != nil {
			return err
		}
		c.logf("real node on %s", c.node.cgroupMode)
	}
	c.Dir = opts.Dir
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "localcp-"); err != nil {
			return err
		}
		c.ownsDir = true
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return err
	}
	// A previous detached Start may still run here; its etcd data is about to go.
	if err := StopDir(c.Dir); err != nil {
		return fmt.Errorf("stopping the previous control plane in %s: %w", c.Dir, err)
	}
	c.KubeconfigPath = filepath.Join(c.Dir, "kubeconfig")
	return nil
}

// startCore starts etcd and kube-apiserver on fresh ports and waits for /readyz.
func (c *ControlPlane) startCore(ctx context.Context, quota int64) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	c.etcdURL = etcdURL
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	// A real node's pods reach the API server at the bridge's address only.
	host := "127.0.0.1"
	if c.RealNode {
		host = RealNodeAPIAddress
	}
	c.APIServerURL = fmt.Sprintf("https://%s:%d", host, ports[2])

	dataDir := filepath.Join(c.Dir, "etcd")
	if err := os.RemoveAll(dataDir); err != nil {
		return err
	}
	// A unique member name tells our etcd apart from another one that won the
	// race for the port (ours then exits, and Start retries).
	member := fmt.Sprintf("localcp-%d-%d", os.Getpid(), ports[1])
	if err := c.start(etcdBin, []string{
		"--name=" + member,
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=" + member + "=" + peerURL,
		"--unsafe-no-fsync", // throwaway data: skip fsync, much faster on slow disks
		// A single member elects itself after one election timeout: 100ms
		// instead of 1s makes etcd ready ~0.5s sooner. No peers, so no cost.
		"--heartbeat-interval=10",
		"--election-timeout=100",
		"--quota-backend-bytes=" + strconv.FormatInt(quota, 10),
		"--log-level=warn",
	}); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "etcd healthy", 30*time.Second, func(ctx context.Context) error {
		if err := httpOK(ctx, http.MethodGet, http.DefaultClient, etcdURL+"/health", `"health":"true"`); err != nil {
			return err
		}
		// grpc-gateway endpoint of MemberList.
		return httpOK(ctx, http.MethodPost, http.DefaultClient, etcdURL+"/v3/cluster/member/list", `"`+member+`"`)
	}); err != nil {
		return err
	}

	p := c.pki
	extra, err := c.auditFlags()
	if err != nil {
		return err
	}
	// The endpoint reconciler would publish 127.0.0.1 as the endpoint of
	// the `kubernetes` Service, which validation rejects (loopback). A real
	// node's API server advertises the bridge address, which pods reach
	// through the Service (kube-proxy), so its reconciler runs.
	reconciler := "none"
	if c.RealNode {
		reconciler = "lease"
		extra = append(extra,
			// Webhooks and aggregated APIs are called at their pod's address
			// instead of their Service IP, which the host cannot route.
			"--enable-aggregator-routing=true",
			// For logs, exec and port-forward: the kubelet only serves clients
			// it can authenticate (system:masters is then authorized).
			"--kubelet-client-certificate="+p.adminCert,
			"--kubelet-client-key="+p.adminKey,
			// The node's name does not resolve; its InternalIP is the bridge's.
			"--kubelet-preferred-address-types=InternalIP")
	}
	if err := c.start(apiserverBin, append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + host,
		"--advertise-address=" + host,
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--tls-cert-file=" + p.servingCert,
		"--tls-private-key-file=" + p.servingKey,
		"--client-ca-file=" + p.caCert,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPub,
		"--service-account-signing-key-file=" + p.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=" + reconciler,
		"--allow-privileged=true",
		"--profiling=" + strconv.FormatBool(c.profiling),
	}, extra...)); err != nil {
		return err
	}
	if err := writeKubeconfig(c.KubeconfigPath, c.APIServerURL, p); err != nil {
		return err
	}
	return c.waitAPIServer(ctx)
}

func (c *ControlPlane) waitAPIServer(ctx context.Context) error {
	cfg, err := c.RESTConfig()
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, "kube-apiserver /readyz", 2*time.Minute, func(ctx context.Context) error {
		return httpOK(ctx, http.MethodGet, hc, c.APIServerURL+"/readyz", "ok")
	})
}

// CrashAPIServer kills kube-apiserver with SIGKILL, as a crash or an OOM kill
// would, and starts it again on the same port and etcd; it returns once the new
// one is ready. Every client's connections and watches break meanwhile.
func (c *ControlPlane) CrashAPIServer(ctx context.Context) error {
	p, err := c.kill(apiserverBin)
	if err != nil {
		return err
	}
	if err := c.run(apiserverBin, os.O_APPEND, p.args, p.env); err != nil {
		return err
	}
	if err := c.writePids(); err != nil {
		return err
	}
	return c.waitAPIServer(ctx)
}

// CompactEtcd compacts etcd's history up to its current revision and
// defragments it, as a cluster's periodic maintenance does: every watch that
// resumes from an older revision then gets "too old resource version" and relists.
func (c *ControlPlane) CompactEtcd(ctx context.Context) (int64, error) {
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// A range over one key answers with the store's current revision.
	if err := etcdCall(ctx, c.etcdURL+"/v3/kv/range", `{"key":"L3JlZ2lzdHJ5"}`, &rng); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(rng.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd revision %q: %w", rng.Header.Revision, err)
	}
	if err := etcdCall(ctx, c.etcdURL+"/v3/kv/compaction", fmt.Sprintf(`{"revision":"%d","physical":true}`, rev), nil); err != nil {
		return 0, err
	}
	return rev, etcdCall(ctx, c.etcdURL+"/v3/maintenance/defragment", `{}`, nil)
}

// etcdCall posts body to etcd's gRPC gateway and decodes the answer into out.
func etcdCall(ctx context.Context, url, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", url, resp.Status, data)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// auditPolicy logs every request at level Metadata, once it has completed.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// auditFlags writes the audit policy and returns kube-apiserver's audit flags
// (none unless Options.AuditLog). A previous run's log is removed.
func (c *ControlPlane) auditFlags() ([]string, error) {
	if !c.auditLog {
		return nil, nil
	}
	policy := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	if err := os.Remove(c.AuditLogPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + c.AuditLogPath(),
		"--audit-log-format=json",
		"--audit-log-maxsize=100000", // MB: never rotate during a run
	}, nil
}

// AuditLogPath returns kube-apiserver's audit log (JSON lines), or "" when
// the control plane was started without Options.AuditLog.
func (c *ControlPlane) AuditLogPath() string {
	if !c.auditLog {
		return ""
	}
	return filepath.Join(c.Dir, "audit.log")
}

// startNodeComponents registers the fake node, starts kube-controller-manager,
// kube-scheduler and kwok, and waits until the node can take pods.
func (c *ControlPlane) startNodeComponents(ctx context.Context, cs kubernetes.Interface) error {
	node := NodeName
	if c.RealNode {
		node = RealNodeName
	} else if _, err := cs.CoreV1().Nodes().Create(ctx, fakeNode(NodeName), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", NodeName, err)
	}

	p := c.pki
	if err := c.start(kcmBin, []string{
		"--kubeconfig=" + c.KubeconfigPath,
		"--leader-elect=false",
		"--secure-port=0", // no serving port at all
		"--controllers=*", // includes node-lifecycle, which lifts the not-ready taint
		"--use-service-account-credentials=false",
		"--service-account-private-key-file=" + p.saKey,
		"--root-ca-file=" + p.caCert,
		"--cluster-signing-cert-file=" + p.caCert,
		"--cluster-signing-key-file=" + p.caKey,
		// client-go's default 20 QPS would make kcm the bottleneck of benchmarks.
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
	}); err != nil {
		return err
	}
	if err := c.start(schedulerBin, []string{
		"--kubeconfig=" + c.KubeconfigPath,
		"--leader-elect=false",
		"--secure-port=0",
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
	}); err != nil {
		return err
	}
	if c.RealNode {
		if err := c.startRealNode(ctx, cs); err != nil {
			return err
		}
	} else if err := c.start(kwokBin, []string{
		"--kubeconfig=" + c.KubeconfigPath,
		"--config=" + c.stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + kwokAnnotation + "=fake",
		// kwok (unlike kwokctl) defaults to 0 = no node leases; without lease
		// renewals node-lifecycle marks the node NotReady after its grace period.
		"--node-lease-duration-seconds=40",
		// Pod IPs; the default 10.0.0.0/24 runs out after 254 pods.
		"--cidr=10.128.0.0/12",
		// No --server-address/--node-port: kwok then opens no port.
	}, "KWOK_WORKDIR="+filepath.Join(c.Dir, "kwok")); err != nil { // keep ~/.kwok/kwok.yaml out
		return err
	}
	if err := c.waitFor(ctx, "node "+node+" Ready and untainted", 2*time.Minute, func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return nodeUsable(n)
	}); err != nil {
		return err
	}
	// The serviceaccount controller creates it; pods cannot be created before.
	return c.waitFor(ctx, "default ServiceAccount", time.Minute, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// fakeNode is a node that kwok plays the kubelet of.
func fakeNode(name string) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1000"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("10000"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{kwokAnnotation: "fake"},
			Labels: map[string]string{
				"type":                   "kwok",
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
			},
		},
		// Status is kept on create for nodes (kubelets self-register that way);
		// kwok's node-initialize stage keeps the allocatable it finds.
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
}

// AddNode adds a kwok node with taints to a Full control plane (a node
// joining the cluster) and waits until it is Ready and has no not-ready taint.
func (c *ControlPlane) AddNode(ctx context.Context, name string, taints ...corev1.Taint) error {
	cs, err := c.clientset()
	if err != nil {
		return err
	}
	node := fakeNode(name)
	node.Spec.Taints = taints
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	return c.waitFor(ctx, "node "+name+" Ready and untainted", 2*time.Minute, func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return nodeUsable(n)
	})
}

func nodeUsable(n *corev1.Node) error {
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return errors.New("node not Ready")
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return fmt.Errorf("node has taint %s:%s", t.Key, t.Effect)
		}
	}
	return nil
}

// RESTConfig returns an admin client configuration.
func (c *ControlPlane) RESTConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", c.KubeconfigPath)
}

func (c *ControlPlane) clientset() (*kubernetes.Clientset, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// WaitServed waits until the API server's discovery lists every named
// resource (plural names) of groupVersion, e.g. "cert-manager.io/v1",
// "certificates", "issuers": after applying CRDs, before applying objects
// of their kinds. A CRD is Established before discovery serves it (the
// server adds its group a moment later), and kubectl, which maps a
// manifest's kind through discovery, fails on that moment with "no matches
// for kind". (Nor is `kubectl wait --for=condition=Established` the wait:
// it fails on a CRD that has no conditions yet.)
func (c *ControlPlane) WaitServed(ctx context.Context, groupVersion string, resources ...string) error {
	cs, err := c.clientset()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var missing []string
	for {
		missing = missing[:0]
		list, err := cs.Discovery().ServerResourcesForGroupVersion(groupVersion)
		served := map[string]bool{}
		if err == nil {
			for _, r := range list.APIResources {
				served[r.Name] = true
			}
		}
		for _, r := range resources {
			if !served[r] {
				missing = append(missing, r)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("discovery of %s does not list %s: %w", groupVersion, strings.Join(missing, ", "), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LogPath returns the log file of a component ("etcd", "kube-apiserver",
// "kube-controller-manager", "kube-scheduler", "kwok"; with a real node
// "containerd", "kubelet", "kube-proxy").
func (c *ControlPlane) LogPath(component string) string {
	return filepath.Join(c.Dir, component+".log")
}

// Tail returns the last n lines of a component's log, for test failure output.
func (c *ControlPlane) Tail(component string, n int) string {
	return tailFile(c.LogPath(component), n)
}

// Stop ends all components (SIGTERM, then SIGKILL after a few seconds) and
// waits for them. It removes the state directory if Start created it.
// Calling it again returns the first result.
func (c *ControlPlane) Stop() error {
	c.stopOnce.Do(func() {
		if c.RealNode {
			// Containers first, while containerd still answers.
			c.drainRealNode()
		}
		c.stopErr = c.stopProcs(stopGrace)
		if c.RealNode {
			// Even after a failed stop: the node's leftovers are shared names.
			c.stopErr = errors.Join(c.stopErr, c.cleanupRealNode())
		}
		if c.stopErr != nil {
			return
		}
		if c.ownsDir {
			c.stopErr = os.RemoveAll(c.Dir)
		} else {
			_ = os.Remove(filepath.Join(c.Dir, pidsFile))
		}
	})
	return c.stopErr
}

// Attach returns the control plane that a detached Start left running in dir,
// if all its components are alive and the API server is ready; otherwise an
// error wrapping ErrNotRunning. Stop on the result ends it.
func Attach(ctx context.Context, dir string) (*ControlPlane, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	procs, all, err := attachProcs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w in %s: %w", ErrNotRunning, dir, err)
	}
	if !all {
		return nil, fmt.Errorf("%w in %s: some components have exited", ErrNotRunning, dir)
	}
	c := &ControlPlane{Dir: dir, KubeconfigPath: filepath.Join(dir, "kubeconfig"), procs: procs, logf: func(string, ...any) {}}
	for _, p := range procs {
		c.Full = c.Full || p.name == kwokBin || p.name == kubeletBin
		c.RealNode = c.RealNode || p.name == kubeletBin
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, fmt.Errorf("%w in %s: %w", ErrNotRunning, dir, err)
	}
	c.APIServerURL = cfg.Host
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := httpOK(ctx, http.MethodGet, hc, c.APIServerURL+"/readyz", "ok"); err != nil {
		return nil, fmt.Errorf("%w in %s: %w", ErrNotRunning, dir, err)
	}
	return c, nil
}

// StopDir stops whatever components listed in dir/pids are still running,
// healthy or not. No pids file means nothing to stop.
func StopDir(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	procs, _, err := attachProcs(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// A real node leaves mounts, a bridge and iptables rules even when its
	// processes have all gone (a crash), so the directory decides, not procs.
	c := &ControlPlane{Dir: dir, procs: procs, RealNode: hasRealNode(dir), logf: func(string, ...any) {}}
	return c.Stop()
}

// httpOK sends a request (POSTs carry "{}") and expects status 200 and a body
// containing want.
func httpOK(ctx context.Context, method string, hc *http.Client, url, want string) error {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(data), want) {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(data))
	}
	return nil
}

// isK8sComponent reports whether the binary name comes from
// k8s.io/kubernetes, and so from Options.K8sBinDir.
func isK8sComponent(name string) bool {
	switch name {
	case apiserverBin, kcmBin, schedulerBin, kubeletBin, kubeProxyBin:
		return true
	}
	return false
}

// defaultBinDir is $CONFIGSTAMP_BIN or <repo>/bin, the repo being the nearest
// directory upwards whose go.mod declares this module.
func defaultBinDir() (string, error) {
	if d := os.Getenv("CONFIGSTAMP_BIN"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && declaresModule(data, "github.com/configstamp/configstamp") {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no go.mod of github.com/configstamp/configstamp above the working directory to find bin/; set CONFIGSTAMP_BIN or Options.BinDir", ErrBinariesMissing)
		}
		dir = parent
	}
}

func declaresModule(gomod []byte, path string) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == path {
			return true
		}
	}
	return false
}
