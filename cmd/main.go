// Command configstamp runs the configstamp webhook and reconciler.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/fence"
	"github.com/configstamp/configstamp/controllers/hashkey"
	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/wiredigest"
	"github.com/configstamp/configstamp/controllers/workload"
	"github.com/configstamp/configstamp/webhook"
	"github.com/configstamp/configstamp/webhook/live"
)

type options struct {
	// kinds is the registry of workload kinds, built once in run from the
	// built-in kinds and the installed kinds of --kinds-config.
	kinds               *workload.Registry
	namespace           string
	certMode            string
	certDir             string
	webhookURL          string
	webhookService      string
	webhookHost         string
	webhookPort         int
	webhookConfigName   string
	tlsSecret           string
	hashKeySecret       string
	probeAddr           string
	metricsAddr         string
	metricsSecure       bool
	metricsCertDir      string
	enableHTTP2         bool
	pprofAddr           string
	leaderElect         bool
	leaderElectionID    string
	leaseDuration       time.Duration
	renewDeadline       time.Duration
	retryPeriod         time.Duration
	logFormat           string
	logLevel            int
	concurrency         int
	qps                 float64
	webhookQPS          float64
	burst               int
	caLifetime          time.Duration
	certLifetime        time.Duration
	renewBefore         time.Duration
	certCheckInterval   time.Duration
	gracefulShutdownFor time.Duration
	shutdownDelay       time.Duration
	rollout             rollout.Policy
	watchNamespaces     stringList
	excludeNamespaces   stringList
	namespaceSelector   string
	scope               *workload.Scope
	ringSelector        string
	rings               labels.Selector
	applyWarnings       bool
	pin                 bool
	kindsConfig         string
	printRBAC           bool
	kindsRecheck        time.Duration
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "configstamp:", err)
		os.Exit(1)
	}
}

func parseFlags() *options {
	o := &options{}
	fs := flag.CommandLine
	// --kubeconfig is registered by controller-runtime (pkg/client/config) and read by ctrl.GetConfig.
	fs.StringVar(&o.namespace, "namespace", envOr("POD_NAMESPACE", "configstamp-system"), "configstamp's own namespace (hash key, TLS secret, leader election).")
	fs.StringVar(&o.certMode, "cert-mode", "cert-manager", `"cert-manager": serve the mounted files from --cert-dir (hot-reloaded); "self": make and rotate a CA and serving certificate kept in a Secret, and inject the CA bundle.`)
	fs.StringVar(&o.certDir, "cert-dir", "", "Directory of tls.crt and tls.key. Default: the mounted /tmp/k8s-webhook-server/serving-certs in cert-manager mode, a temporary directory in self mode.")
	fs.StringVar(&o.webhookURL, "webhook-url", "", "Self mode: register the MutatingWebhookConfiguration with this base URL (out of cluster), e.g. https://127.0.0.1:9443.")
	fs.StringVar(&o.webhookService, "webhook-service", "configstamp-webhook-service", "Self mode without --webhook-url: the webhook Service in --namespace.")
	fs.StringVar(&o.webhookHost, "webhook-host", "", "Address the webhook server binds. Default: the host of --webhook-url when it is an IP, else all addresses.")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	fs.StringVar(&o.webhookConfigName, "webhook-config-name", "configstamp", "Name of the MutatingWebhookConfiguration (self mode writes it).")
	fs.StringVar(&o.tlsSecret, "tls-secret", "configstamp-webhook-tls", "Self mode: Secret holding the CA and serving certificate.")
	fs.StringVar(&o.hashKeySecret, "hash-key-secret", "configstamp-hash-key", "Secret holding the per-installation HMAC key.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", `Address of /metrics; "0" disables it.`)
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve /metrics over HTTPS, each scrape authenticated and authorized by the API server (a bearer token allowed get on /metrics, e.g. by the metrics-reader ClusterRole). false: plain HTTP without authentication, for a loopback address only.")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-path", "", "Directory of the metrics server's tls.crt and tls.key (hot-reloaded). Default: a self-signed certificate made in memory.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "Offer HTTP/2 on the webhook and metrics servers. Off by default: HTTP/2 rapid reset and CONTINUATION floods (CVE-2023-44487, GHSA-qppj-fm5r-hxr3, GHSA-4374-p667-p6c8).")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", `Address of net/http/pprof (e.g. 127.0.0.1:6060); empty disables it.`)
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader for the reconciler (every replica serves the webhook).")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "configstamp.configstamp.io", "Name of the leader election Lease.")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a follower waits after the last renewal before it takes the lease of a leader that is gone.")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew before it gives the lead up.")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often candidates try to take or renew the lease.")
	fs.StringVar(&o.logFormat, "log-format", "json", `"json" or "console".`)
	fs.IntVar(&o.logLevel, "v", 0, "Log verbosity (0 info, 1 debug).")
	fs.IntVar(&o.concurrency, "max-concurrent-reconciles", 32, "Parallel reconciles per workload kind: the one workload controller, whose queue holds every kind, runs this many times the number of kinds (a reconcile mostly waits for its PATCH round trip and the webhook call in it).")
	fs.Float64Var(&o.qps, "kube-api-qps", 300, "The reconciler's client QPS to the API server (a fan-out to N workloads costs N PATCHes).")
	fs.IntVar(&o.burst, "kube-api-burst", 600, "The reconciler's client burst.")
	fs.Float64Var(&o.webhookQPS, "webhook-api-qps", -1, "QPS of the webhook's consistent reads; negative: no client-side limit (the API server's priority and fairness still applies). A throttled webhook delays every admitted write.")
	fs.DurationVar(&o.caLifetime, "ca-lifetime", 5*365*24*time.Hour, "Self mode: CA validity.")
	fs.DurationVar(&o.certLifetime, "cert-lifetime", 365*24*time.Hour, "Self mode: serving certificate validity.")
	fs.DurationVar(&o.renewBefore, "renew-before", 30*24*time.Hour, "Self mode: renew a certificate with less validity left than this.")
	fs.DurationVar(&o.certCheckInterval, "cert-check-interval", 0, "Self mode: how often every replica checks the certificates, picks up renewed ones and keeps the CA bundle. 0: a tenth of --renew-before, between 1s and 10m.")
	fs.DurationVar(&o.gracefulShutdownFor, "graceful-shutdown-timeout", 30*time.Second, "How long to wait for runnables on shutdown.")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay", 5*time.Second, "On SIGTERM, keep serving this long, every admission answered with Connection: close, so the API servers move their connections to a replica that stays, before stopping (a second signal stops at once).")
	fs.DurationVar(&o.rollout.Debounce, "debounce", 2*time.Second, "Quiet window: changes to a workload's sources closer together than this give one rollout (annotation configstamp.io/debounce overrides). 0 rolls at once.")
	fs.DurationVar(&o.rollout.MaxWait, "debounce-max-wait", 30*time.Second, "Longest a rollout waits for a quiet window, so a source rewritten every second still rolls.")
	fs.DurationVar(&o.rollout.RingSettle, "ring-settle", 30*time.Second, "How long a workload in a namespace of a ring above 0 (label "+rollout.LabelRing+") waits, from when its change was seen, for the lower rings' copies of the source to change too before it rolls with a canary of its own; a lower ring that rolls the source holds it longer.")
	fs.IntVar(&o.rollout.MaxConcurrent, "max-concurrent-rollouts", 10, "Budget of workloads rolling at once because of configstamp; a workload holds a slot from its stamp until its rollout completes or fails. 0: unlimited.")
	fs.Float64Var(&o.rollout.PerSecond, "max-rollouts-per-second", 0, "Global rate of rollout starts. 0: unlimited.")
	fs.DurationVar(&o.rollout.ProgressDeadline, "progress-deadline", 10*time.Minute, "A rollout configstamp started that is not complete after this has failed (a Deployment fails earlier on its own progressDeadlineSeconds), and gives its slot back: no workload holds a slot longer.")
	fs.DurationVar(&o.rollout.VerifyWindow, "verify-window", 30*time.Second, "How long the new pods of a rollout configstamp started must stay healthy (Ready, no container restarted) after `kubectl rollout status` calls it complete before it counts as completed; a failure inside it fails the rollout (and halts its change). The slot is held through it; minReadySeconds counts toward it; annotation configstamp.io/verify-window overrides it (at most 10m). 0: completed as soon as it is complete.")
	fs.Var(onFailureFlag{&o.rollout.UndoOnFailure}, "on-failure", `What a failed rollout of a pinned workload does besides the halt: "halt" (default) or "undo": return it to its previous revision, whose snapshots hold the config it ran before (as kubectl rollout undo would). Annotation configstamp.io/on-failure on a workload or Namespace overrides it; needs --pin.`)
	fs.BoolVar(&o.rollout.Canary, "canary", true, "Try each change on one pod first: the first workload of a change's wave (in wave order) is its canary, held at one new pod (a Deployment's surge and minReadySeconds, a StatefulSet's partition, a DaemonSet's one node) until that pod stayed healthy for the verification window; no other pod or workload gets the change before it passes, whatever --max-concurrent-rollouts. A workload that cannot be held (one replica, Recreate, --kinds-config kinds) is its whole rollout's canary. Annotation configstamp.io/canary: \"false\" on a workload or Namespace turns it off there. Needs rollouts followed (--max-concurrent-rollouts > 0 or --halt-on-failure).")
	fs.BoolVar(&o.rollout.HaltOnFailure, "halt-on-failure", true, "When a rollout configstamp started fails, start no further rollouts caused by the same change until the source changes again, the failed workload recovers or is deleted, or its configstamp.io/halted annotation is removed.")
	fs.Var(&o.watchNamespaces, "watch-namespaces", "Comma-separated namespaces this installation acts in (webhook and reconciler); the cache holds only these, and a Role in each suffices (config/namespaced). Empty: every namespace but the excluded ones.")
	fs.Var(&o.excludeNamespaces, "exclude-namespaces", "Comma-separated namespaces this installation never acts in, webhook and reconciler alike; their objects are not cached. --namespace and kube-system are always excluded.")
	fs.StringVar(&o.namespaceSelector, "namespace-selector", "", `Label selector (kubectl syntax, e.g. "team=payments,env in (prod)") a namespace's labels must match to be in scope. Filters what is acted on, not what is cached.`)
	fs.StringVar(&o.ringSelector, "ring-namespace-selector", "", `Label selector (kubectl syntax) a namespace's labels must match for its `+rollout.LabelRing+` label to put it in a ring; empty: every namespace. Where tenants create and label namespaces (Capsule, HNC), select the platform's own.`)
	fs.BoolVar(&o.pin, "pin", false, "Pin the workloads that ask for it (annotation configstamp.io/pin=\"true\" on the workload or its Namespace): their pod templates reference immutable snapshots of their ConfigMaps and Secrets, which configstamp creates (needs create and patch on ConfigMaps and Secrets: the kustomize component config/components/pin). Without it the annotation is ignored with a warning.")
	fs.BoolVar(&o.applyWarnings, "apply-warnings", false, "Serve the apply-time warning webhook (ConfigMap/Secret UPDATE: an admission warning naming the workloads the change rolls; never denies). Self mode registers its ValidatingWebhookConfiguration (named --webhook-config-name) and deletes it without the flag; in cert-manager mode apply one as the README shows.")
	fs.StringVar(&o.kindsConfig, "kinds-config", "", "YAML file naming extra workload kinds with a pod template (Argo Rollouts, other CRDs): group, version, kind, resource, templatePath and where their status tells progress (config/kinds). A kind whose CRD is not installed at start is skipped.")
	fs.DurationVar(&o.kindsRecheck, "kinds-recheck-interval", 30*time.Second, "How often to check whether a kind of --kinds-config whose CRD was not installed at start is served now; once served at 3 checks in a row, configstamp exits (after a random part of an interval) to be restarted and handle it. 0: never.")
	fs.BoolVar(&o.printRBAC, "print-rbac", false, "Print the ClusterRole and ClusterRoleBinding the kinds of --kinds-config need (get, list, watch, patch of exactly those) and exit; with --watch-namespaces, a Role and RoleBinding for config/namespaced/watched-role instead.")
	flag.Parse()
	return o
}

// onFailureFlag is --on-failure: "halt" or "undo".
type onFailureFlag struct{ undo *bool }

func (f onFailureFlag) String() string {
	if f.undo != nil && *f.undo {
		return "undo"
	}
	return "halt"
}

func (f onFailureFlag) Set(v string) error {
	switch v {
	case "halt", "undo":
		*f.undo = v == "undo"
		return nil
	}
	return fmt.Errorf(`%q is neither "halt" nor "undo"`, v)
}

// stringList is a repeatable, comma-separated flag value.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, strings.Split(v, ",")...)
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func newLogger(format string, level int) (logr.Logger, error) {
	cfg := zap.NewProductionConfig()
	if format == "console" {
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	} else if format != "json" {
		return logr.Logger{}, fmt.Errorf("unknown --log-format %q (json or console)", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(zapcore.Level(-level))
	cfg.Sampling = nil
	z, err := cfg.Build()
	if err != nil {
		return logr.Logger{}, err
	}
	return zapr.NewLogger(z), nil
}

func restConfig(o *options) (*rest.Config, error) {
	cfg, err := ctrl.GetConfig() // --kubeconfig, $KUBECONFIG, in-cluster, ~/.kube/config
	if err != nil {
		return nil, fmt.Errorf("while loading the kubeconfig: %w", err)
	}
	cfg.QPS = float32(o.qps)
	cfg.Burst = o.burst
	cfg.UserAgent = "configstamp"
	// Protobuf for built-in types: less to decode and less garbage than JSON
	// when the informers list every ConfigMap and Secret.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg, nil
}

// run is configstamp's start, a step a function: flags; the one-shot
// commands; logging and scope; clients; the extra kinds; the hash key and the
// certificates; the manager; the reconcilers and the webhook; checks; start.
func run() error {
	o := parseFlags()
	if *showVersion {
		return printVersion(os.Stdout)
	}
	kinds, err := workload.LoadKindsConfig(o.kindsConfig)
	if err != nil {
		return err
	}
	if o.printRBAC {
		return printKindsRBAC(os.Stdout, kinds, len(o.watchNamespaces) > 0)
	}
	logger, err := setupLogging(o)
	if err != nil {
		return err
	}
	setupLog := logger.WithName("setup")
	cfg, err := restConfig(o)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	drain := &webhook.Drain{}
	ctx := stopContext(o.shutdownDelay, drain.Begin, setupLog)
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("while creating a client: %w", err)
	}
	// The kinds are decided once, into the registry the caches, reconcilers
	// and webhook rules are made from.
	canList := lister(o, direct)
	extra, missing, err := installedKinds(ctx, direct.RESTMapper(), kinds, canList, setupLog)
	if err != nil {
		return err
	}
	o.kinds = workload.NewRegistry(extra...)
	ctx, restart := context.WithCancel(ctx)
	defer restart()
	var restarting atomic.Bool

	keySecret := hashkey.Secret{Namespace: o.namespace, Name: o.hashKeySecret}
	keys, err := keySecret.Load(ctx, direct)
	if err != nil {
		return err
	}
	// The certificate mode is decided here, once; below, only the provider.
	webhookCerts, webhookHost, err := certProvider(o, direct, logger.WithName("certs"))
	if err != nil {
		return err
	}
	certDir, err := webhookCerts.Prepare(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := webhookCerts.Close(); err != nil {
			setupLog.Error(err, "cleaning up the certificate files")
		}
	}()
	mgr, lease, err := newManager(o, cfg, scheme, webhookHost, certDir, drain, setupLog)
	if err != nil {
		return err
	}
	self, err := wire(ctx, o, mgr, lease, keySecret, keys, cfg, scheme, direct)
	if err != nil {
		return err
	}
	// Self mode registers the webhook configuration and renews the
	// certificates on every replica; both modes add a ready check.
	if err := webhookCerts.Start(ctx, mgr); err != nil {
		return err
	}
	if err := addChecks(mgr); err != nil {
		return err
	}
	if len(missing) > 0 && o.kindsRecheck > 0 {
		later := &servedLater{missing: missing, interval: o.kindsRecheck, log: setupLog, canList: canList,
			restart: func() { restarting.Store(true); restart() }}
		if err := addKindsWatcher(mgr, cfg, later); err != nil {
			return err
		}
	}

	setupLog.Info("starting", "user", self, "namespace", o.namespace, "certMode", o.certMode, "webhookURL", o.webhookURL,
		"metricsSecure", o.metricsSecure, "http2", o.enableHTTP2,
		"scope", o.scope.String(), "leaderElectionID", o.leaderElectionID, "webhookConfigName", o.webhookConfigName,
		"hashKeySecret", o.hashKeySecret, "tlsSecret", o.tlsSecret)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("while running the manager: %w", err)
	}
	if restarting.Load() {
		return errKindsServed
	}
	return nil
}

// wire adds what runs in the manager: the field indexes, the reconcilers and
// their scheduler (controllers.Setup), and the webhook; it returns
// configstamp's own user name.
func wire(ctx context.Context, o *options, mgr ctrl.Manager, lease *fence.Lease, keySecret hashkey.Secret, keys *stamp.Keyring,
	cfg *rest.Config, scheme *runtime.Scheme, direct client.Client) (string, error) {
	if err := controllers.SetupIndexes(ctx, mgr.GetFieldIndexer(), o.kinds); err != nil {
		return "", err
	}
	if err := controllers.Setup(mgr, controllers.Options{Kinds: o.kinds, Policy: o.rollout, Keys: keys,
		KeySecret: keySecret, MaxConcurrentReconciles: o.concurrency, Scope: o.scope, Lease: lease, Pin: o.pin, Rings: o.rings}); err != nil {
		return "", err
	}
	return setupWebhook(ctx, o, mgr, cfg, scheme, keys, direct)
}

// addKindsWatcher adds later, which restarts configstamp once one of the
// --kinds-config kinds missing at start is served.
func addKindsWatcher(mgr ctrl.Manager, cfg *rest.Config, later *servedLater) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("while creating a discovery client: %w", err)
	}
	later.discovery = dc
	if err := mgr.Add(later); err != nil {
		return fmt.Errorf("while adding the kinds watcher: %w", err)
	}
	return nil
}

// setupLogging makes the logger (zap through zapr, for controller-runtime and
// klog too), decides the scope once for the webhook and the reconciler, and
// tunes the Go runtime's memory settings.
func setupLogging(o *options) (logr.Logger, error) {
	logger, err := newLogger(o.logFormat, o.logLevel)
	if err != nil {
		return logr.Logger{}, err
	}
	if o.scope, err = workload.NewScope(o.namespace, o.watchNamespaces, o.excludeNamespaces, o.namespaceSelector); err != nil {
		return logr.Logger{}, err
	}
	if o.rings, err = labels.Parse(o.ringSelector); err != nil {
		return logr.Logger{}, fmt.Errorf("--ring-namespace-selector=%q: %w", o.ringSelector, err)
	}
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	return logger, tuneMemory(logger.WithName("setup"))
}

// lister tries to list one object of an extra kind, where configstamp may
// (the namespaced install only in its watched namespaces).
func lister(o *options, direct client.Client) func(context.Context, workload.KindConfig) error {
	return func(ctx context.Context, c workload.KindConfig) error {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(c.GVK().GroupVersion().WithKind(c.Kind + "List"))
		opts := []client.ListOption{client.Limit(1)}
		if watched := o.scope.Watched(); len(watched) > 0 {
			opts = append(opts, client.InNamespace(watched[0]))
		}
		return direct.List(ctx, list, opts...)
	}
}

// newManager makes the manager: its cache (scope, slimmed objects), metrics
// and probe servers, webhook server, and leader election through a lease
// whose clock fences the leader's writes (controllers/fence).
func newManager(o *options, cfg *rest.Config, scheme *runtime.Scheme, webhookHost, certDir string, drain *webhook.Drain, log logr.Logger) (ctrl.Manager, *fence.Lease, error) {
	var lease *fence.Lease
	if o.leaderElect {
		var err error
		if lease, err = fence.New(cfg, o.namespace, o.leaderElectionID, o.renewDeadline); err != nil {
			return nil, nil, fmt.Errorf("while creating the leader election lock: %w", err)
		}
	}
	tlsOpts := tlsOptions(o.enableHTTP2)
	cacheOpts := controllers.CacheOptions(o.kinds, o.scope, o.pin)
	// The cache's own connection: its ConfigMap and Secret watches are digested
	// on the wire (controllers/wiredigest); the client's reads stay whole.
	cacheHTTP, err := rest.HTTPClientFor(wiredigest.Config(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("while creating the cache's HTTP client: %w", err)
	}
	cacheOpts.HTTPClient = cacheHTTP
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:         scheme,
		MapperProvider: newMapper,
		Cache:          cacheOpts,
		// The extra kinds are read as unstructured objects: from the cache too.
		Client:                              client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                             metricsOptions(o.metricsAddr, o.metricsSecure, o.metricsCertDir, tlsOpts, log),
		HealthProbeBindAddress:              o.probeAddr,
		PprofBindAddress:                    o.pprofAddr,
		LeaderElection:                      o.leaderElect,
		LeaderElectionID:                    o.leaderElectionID,
		LeaderElectionNamespace:             o.namespace,
		LeaderElectionResourceLockInterface: lockOf(lease),
		LeaseDuration:                       &o.leaseDuration,
		RenewDeadline:                       &o.renewDeadline,
		RetryPeriod:                         &o.retryPeriod,
		// The reconciler's work is idempotent; a new leader may start at once.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &o.gracefulShutdownFor,
		WebhookServer: drain.Server(ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: webhookHost, Port: o.webhookPort, CertDir: certDir, TLSOpts: tlsOpts,
		})),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("while creating the manager: %w", err)
	}
	return mgr, lease, nil
}

// setupWebhook adds the mutating webhook (and the apply-time warnings when
// asked) and returns the user configstamp's requests carry. The webhook reads
// sources live (consistent reads), not from the cache, through its own
// client: the reconciler's rate limit must not delay admissions.
func setupWebhook(ctx context.Context, o *options, mgr ctrl.Manager, cfg *rest.Config, scheme *runtime.Scheme, keys *stamp.Keyring,
	direct client.Client) (string, error) {
	liveCfg := rest.CopyConfig(cfg)
	liveCfg.QPS = float32(o.webhookQPS)
	liveReader, err := client.New(liveCfg, client.Options{Scheme: scheme})
	if err != nil {
		return "", fmt.Errorf("while creating the webhook's client: %w", err)
	}
	resolver := &workload.Resolver{Sources: &live.Reader{Reader: liveReader}, Index: mgr.GetCache(), Keys: keys, Parallel: true}
	self, err := whoami(ctx, direct)
	if err != nil {
		return "", err
	}
	var snapshots *pin.Snapshots
	if o.pin {
		snapshots = &pin.Snapshots{Reader: liveReader, Writer: liveReader}
	}
	if err := webhook.Setup(mgr, resolver, self, o.scope, snapshots, o.kinds, o.rings); err != nil {
		return "", fmt.Errorf("while setting up the webhook: %w", err)
	}
	if o.applyWarnings {
		webhook.SetupWarnings(mgr, o.scope, o.kinds)
	}
	return self, nil
}

// addChecks adds the liveness check and the readiness checks: the webhook
// server started, the caches synced.
func addChecks(mgr ctrl.Manager) error {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("while adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("while adding the webhook ready check: %w", err)
	}
	if err := mgr.AddReadyzCheck("caches", cachesSynced(mgr)); err != nil {
		return fmt.Errorf("while adding the cache ready check: %w", err)
	}
	return nil
}

// lockOf is the lease as the manager's lock: nil without leader election.
func lockOf(l *fence.Lease) resourcelock.Interface {
	if l == nil {
		return nil
	}
	return l
}

// whoami returns the user name configstamp's requests carry, as the API server
// sees it (SelfSubjectReview needs no RBAC).
func whoami(ctx context.Context, c client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("while asking the API server who configstamp is: %w", err)
	}
	return review.Status.UserInfo.Username, nil
}

// cachesSynced is ready once the informers configstamp reads have synced.
func cachesSynced(mgr ctrl.Manager) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("caches not synced")
		}
		return nil
	}
}
