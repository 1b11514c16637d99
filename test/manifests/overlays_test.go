package manifests

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/configstamp/configstamp/webhook"
)

// overlays are the two installable overlays and what each must render.
var overlays = map[string]struct {
	dir    string
	counts map[string]int
	self   bool // --cert-mode=self
}{
	"default": {
		dir: "config/default",
		counts: map[string]int{
			"Namespace": 1, "ServiceAccount": 1,
			"ClusterRole": 3, "ClusterRoleBinding": 2, "Role": 2, "RoleBinding": 2,
			"Deployment": 1, "PodDisruptionBudget": 1, "Service": 1,
			"MutatingWebhookConfiguration": 1,
			"Issuer":                       2, "Certificate": 2,
		},
	},
	"selfsigned": {
		dir: "config/selfsigned",
		counts: map[string]int{
			"Namespace": 1, "ServiceAccount": 1,
			"ClusterRole": 4, "ClusterRoleBinding": 3, "Role": 2, "RoleBinding": 2,
			"Deployment": 1, "PodDisruptionBudget": 1, "Service": 1,
			"MutatingWebhookConfiguration": 1,
		},
		self: true,
	},
}

func TestOverlays(t *testing.T) {
	for name, tc := range overlays {
		t.Run(name, func(t *testing.T) {
			r := kustomize(t, tc.dir)
			if got := r.counts(); !maps.Equal(got, tc.counts) {
				t.Errorf("object counts per kind:\n got %v\nwant %v", got, tc.counts)
			}
			for _, o := range r.objs {
				if ns := o.GetNamespace(); ns != "" && ns != ownNamespace {
					t.Errorf("%s %s is in namespace %q, want %q", o.GetKind(), o.GetName(), ns, ownNamespace)
				}
				if o.GetKind() != "Namespace" && !strings.HasPrefix(o.GetName(), "configstamp-") {
					t.Errorf("%s %s lacks the configstamp- name prefix", o.GetKind(), o.GetName())
				}
			}
			nsObj := getAs[corev1.Namespace](t, r, "Namespace", ownNamespace)
			if nsObj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
				t.Errorf("namespace labels %v: want pod-security.kubernetes.io/enforce=restricted", nsObj.Labels)
			}

			dep := getAs[appsv1.Deployment](t, r, "Deployment", deployment)
			checkDeployment(t, dep)
			c := dep.Spec.Template.Spec.Containers[0]
			svc := checkWebhookService(t, r, dep)
			mwc := getAs[admissionregistrationv1.MutatingWebhookConfiguration](t, r, "MutatingWebhookConfiguration", mwcName)
			checkWebhookClientConfig(t, mwc, svc)

			if v, _ := argValue(c.Args, "webhook-config-name"); v != mwc.Name {
				t.Errorf("--webhook-config-name=%q, want the MutatingWebhookConfiguration's name %q", v, mwc.Name)
			}
			if tc.self {
				checkSelfMode(t, r, dep, svc, mwc)
			} else {
				checkCertManagerMode(t, r, dep, svc, mwc)
			}
			checkRBACWiring(t, r)
		})
	}
}

func checkDeployment(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	spec := dep.Spec.Template.Spec
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", dep.Spec.Replicas)
	}
	if spec.ServiceAccountName != serviceAccount {
		t.Errorf("serviceAccountName = %q, want %q", spec.ServiceAccountName, serviceAccount)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != managerImage {
		t.Errorf("image = %q, want %q (config/manager/kustomization.yaml images)", c.Image, managerImage)
	}
	for flag, want := range map[string]string{
		"health-probe-bind-address": ":8081",
		"metrics-bind-address":      ":8443",
		"webhook-port":              "9443",
	} {
		if v, ok := argValue(c.Args, flag); !ok || v != want {
			t.Errorf("--%s=%q, want %q", flag, v, want)
		}
	}
	if !slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("args %v lack --leader-elect", c.Args)
	}
	// /metrics over HTTPS with authentication and authorization, HTTP/2 off:
	// the binary's defaults, which the overlays must not turn off.
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--metrics-secure") || strings.HasPrefix(a, "--enable-http2") {
			t.Errorf("argument %s: the overlays keep the secure defaults (HTTPS metrics, no HTTP/2)", a)
		}
	}
	if _, ok := argValue(c.Args, "namespace"); ok {
		t.Errorf("args %v set --namespace: it must come from POD_NAMESPACE so the overlay's namespace is the only place", c.Args)
	}
	podNS := false
	memoryLimit := false
	for _, e := range c.Env {
		if e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			podNS = true
		}
		// cmd/memory.go sets Go's soft memory limit from it.
		if e.Name == "CONFIGSTAMP_MEMORY_LIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
			e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && e.ValueFrom.ResourceFieldRef.ContainerName == c.Name {
			memoryLimit = true
		}
	}
	if !podNS {
		t.Errorf("env %v lacks POD_NAMESPACE from fieldRef metadata.namespace", c.Env)
	}
	if !memoryLimit {
		t.Errorf("env %v lacks CONFIGSTAMP_MEMORY_LIMIT from resourceFieldRef limits.memory of container %s", c.Env, c.Name)
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if want := map[string]int32{"webhook-server": 9443, "metrics": 8443, "health": 8081}; !maps.Equal(ports, want) {
		t.Errorf("container ports %v, want %v", ports, want)
	}
	for probe, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != probe || p.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %s: got %+v, want httpGet %s on port health (8081)", probe, p, probe)
		}
	}

	res := c.Resources
	if res.Requests.Cpu().String() != "50m" || res.Requests.Memory().String() != "128Mi" || res.Limits.Memory().String() != "256Mi" {
		t.Errorf("resources = %+v, want requests cpu 50m memory 128Mi, limits memory 256Mi", res)
	}
	if !res.Limits.Cpu().IsZero() {
		t.Errorf("cpu limit %v: none wanted (throttling a webhook delays admissions)", res.Limits.Cpu())
	}

	// Restricted Pod Security Standard.
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
		(sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("container securityContext %+v: want no privilege escalation, read-only root, drop ALL", sc)
	}
	// A read-only root needs a writable /tmp.
	tmp := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/tmp" {
			for _, v := range spec.Volumes {
				tmp = tmp || (v.Name == m.Name && v.EmptyDir != nil)
			}
		}
	}
	if !tmp {
		t.Errorf("no emptyDir mounted at /tmp (mounts %v)", c.VolumeMounts)
	}

	// Replicas spread across nodes, preferred.
	podLabels := labels.Set(dep.Spec.Template.Labels)
	spread := false
	for _, tsc := range spec.TopologySpreadConstraints {
		sel, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
		spread = spread || (err == nil && tsc.TopologyKey == corev1.LabelHostname &&
			tsc.WhenUnsatisfiable == corev1.ScheduleAnyway && sel.Matches(podLabels))
	}
	if !spread {
		t.Errorf("topologySpreadConstraints %+v: want a ScheduleAnyway spread across %s matching the pods", spec.TopologySpreadConstraints, corev1.LabelHostname)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("selector %v does not match the pod labels %v", dep.Spec.Selector, podLabels)
	}
}

// checkWebhookService checks the Service the webhook is called through and
// returns it.
func checkWebhookService(t *testing.T, r *rendered, dep *appsv1.Deployment) *corev1.Service {
	t.Helper()
	svc := getAs[corev1.Service](t, r, "Service", webhookService)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service selector %v does not select the manager pods %v", svc.Spec.Selector, dep.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.IntValue() != 9443 {
		t.Errorf("Service ports %+v, want 443 → 9443", svc.Spec.Ports)
	}

	pdb := getAs[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", deployment)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget minAvailable = %v, want 1", pdb.Spec.MinAvailable)
	}
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("PodDisruptionBudget selector %v does not select the manager pods", pdb.Spec.Selector)
	}
	return svc
}

func checkWebhookClientConfig(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration, svc *corev1.Service) {
	t.Helper()
	if len(mwc.Webhooks) != 3 {
		t.Errorf("%d webhooks, want 3", len(mwc.Webhooks))
	}
	for _, wh := range mwc.Webhooks {
		s := wh.ClientConfig.Service
		if s == nil || s.Name != svc.Name || s.Namespace != svc.Namespace || s.Path == nil || *s.Path != webhook.Path ||
			(s.Port != nil && *s.Port != svc.Spec.Ports[0].Port) {
			t.Errorf("webhook %s clientConfig.service = %+v, want %s/%s path %s", wh.Name, s, svc.Namespace, svc.Name, webhook.Path)
		}
		if wh.ClientConfig.URL != nil || len(wh.ClientConfig.CABundle) > 0 {
			t.Errorf("webhook %s: a URL or a caBundle in the manifest (the bundle is injected)", wh.Name)
		}
		excluded := false
		for _, e := range wh.NamespaceSelector.MatchExpressions {
			excluded = excluded || (e.Key == corev1.LabelMetadataName && e.Operator == metav1.LabelSelectorOpNotIn &&
				slices.Equal(e.Values, []string{ownNamespace, "kube-system"}))
		}
		if !excluded {
			t.Errorf("webhook %s namespaceSelector %+v does not exclude %s and kube-system", wh.Name, wh.NamespaceSelector, ownNamespace)
		}
	}
}

func checkCertManagerMode(t *testing.T, r *rendered, dep *appsv1.Deployment, svc *corev1.Service, mwc *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	if v, _ := argValue(c.Args, "cert-mode"); v != "cert-manager" {
		t.Errorf("--cert-mode=%q, want cert-manager", v)
	}
	cert := getAs[cmapi.Certificate](t, r, "Certificate", servingCert)

	want := svc.Namespace + "/" + cert.Name
	if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != want {
		t.Errorf("cert-manager.io/inject-ca-from = %q, want %q", got, want)
	}
	wantDNS := []string{svc.Name + "." + svc.Namespace + ".svc", svc.Name + "." + svc.Namespace + ".svc.cluster.local"}
	if !slices.Equal(cert.Spec.DNSNames, wantDNS) {
		t.Errorf("serving Certificate dnsNames = %v, want %v", cert.Spec.DNSNames, wantDNS)
	}

	// The serving certificate's Secret is mounted read-only at --cert-dir.
	certDir, _ := argValue(c.Args, "cert-dir")
	if certDir != "/tmp/k8s-webhook-server/serving-certs" {
		t.Errorf("--cert-dir=%q, want /tmp/k8s-webhook-server/serving-certs", certDir)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == cert.Spec.SecretName {
				mounted = m.MountPath == certDir && m.ReadOnly
			}
		}
	}
	if !mounted {
		t.Errorf("Secret %s of Certificate %s is not mounted read-only at %s", cert.Spec.SecretName, cert.Name, certDir)
	}

	// serving-cert ← CA Issuer ← CA Certificate (isCA, ECDSA) ← selfSigned Issuer.
	if cert.Spec.IsCA || cert.Spec.PrivateKey == nil || cert.Spec.PrivateKey.Algorithm != cmapi.ECDSAKeyAlgorithm {
		t.Errorf("serving Certificate: want a non-CA ECDSA certificate, got %+v", cert.Spec)
	}
	caIssuer := getAs[cmapi.Issuer](t, r, "Issuer", cert.Spec.IssuerRef.Name)
	if cert.Spec.IssuerRef.Kind != "Issuer" || caIssuer.Spec.CA == nil {
		t.Fatalf("serving Certificate is issued by %+v, want a CA Issuer", cert.Spec.IssuerRef)
	}
	var ca *cmapi.Certificate
	for _, o := range r.all("Certificate") {
		if c := typed[cmapi.Certificate](t, o); c.Spec.SecretName == caIssuer.Spec.CA.SecretName {
			ca = c
		}
	}
	if ca == nil {
		t.Fatalf("no Certificate makes the CA Issuer's Secret %s", caIssuer.Spec.CA.SecretName)
	}
	if !ca.Spec.IsCA || ca.Spec.PrivateKey == nil || ca.Spec.PrivateKey.Algorithm != cmapi.ECDSAKeyAlgorithm {
		t.Errorf("CA Certificate %s: want isCA and ECDSA, got %+v", ca.Name, ca.Spec)
	}
	root := getAs[cmapi.Issuer](t, r, "Issuer", ca.Spec.IssuerRef.Name)
	if ca.Spec.IssuerRef.Kind != "Issuer" || root.Spec.SelfSigned == nil {
		t.Errorf("CA Certificate is issued by %+v, want a selfSigned Issuer", ca.Spec.IssuerRef)
	}
}

func checkSelfMode(t *testing.T, r *rendered, dep *appsv1.Deployment, svc *corev1.Service, mwc *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	if v, _ := argValue(c.Args, "cert-mode"); v != "self" {
		t.Errorf("--cert-mode=%q, want self", v)
	}
	if v, _ := argValue(c.Args, "webhook-service"); v != svc.Name {
		t.Errorf("--webhook-service=%q, want the webhook Service's name %q", v, svc.Name)
	}
	if v, ok := argValue(c.Args, "tls-secret"); !ok || v == "" {
		t.Errorf("args %v lack --tls-secret", c.Args)
	}
	for _, flag := range []string{"cert-dir", "webhook-url"} {
		if _, ok := argValue(c.Args, flag); ok {
			t.Errorf("self mode in a cluster sets --%s (args %v)", flag, c.Args)
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			t.Errorf("self mode mounts Secret volume %s", v.Name)
		}
	}
	if _, ok := mwc.Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Errorf("self mode MutatingWebhookConfiguration has cert-manager.io/inject-ca-from")
	}
}

// checkRBACWiring checks that every binding binds an existing role to the
// manager's ServiceAccount only, and that the Deployment runs as it.
func checkRBACWiring(t *testing.T, r *rendered) {
	t.Helper()
	getAs[corev1.ServiceAccount](t, r, "ServiceAccount", serviceAccount)
	bound := map[string]bool{}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range r.all(kind) {
			b := typed[rbacv1.RoleBinding](t, o) // same shape as ClusterRoleBinding
			getAs[rbacv1.ClusterRole](t, r, b.RoleRef.Kind, b.RoleRef.Name)
			if kind == "ClusterRoleBinding" && b.RoleRef.Kind != "ClusterRole" {
				t.Errorf("%s %s binds a %s", kind, b.Name, b.RoleRef.Kind)
			}
			want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: ownNamespace}}
			if !slices.Equal(b.Subjects, want) {
				t.Errorf("%s %s subjects = %+v, want only %+v", kind, b.Name, b.Subjects, want)
			}
			bound[b.RoleRef.Kind+"/"+b.RoleRef.Name] = true
		}
	}
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, o := range r.all(kind) {
			switch {
			case kind == "ClusterRole" && o.GetName() == metricsReader:
				// For scrapers to bind; configstamp itself must not hold it.
				if bound[kind+"/"+o.GetName()] {
					t.Errorf("%s %s is bound to configstamp's ServiceAccount; it is for scrapers", kind, o.GetName())
				}
			case !bound[kind+"/"+o.GetName()]:
				t.Errorf("%s %s is bound by nothing", kind, o.GetName())
			}
		}
	}
}

// metricsReader is the ClusterRole a scraper of /metrics needs (get on the
// non-resource URL /metrics), shipped unbound like kubebuilder's.
const metricsReader = "configstamp-metrics-reader"

// checkMetricsReader checks that the metrics-reader ClusterRole grants get on
// /metrics and nothing else.
func checkMetricsReader(t *testing.T, r *rendered) {
	t.Helper()
	role := getAs[rbacv1.ClusterRole](t, r, "ClusterRole", metricsReader)
	want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].NonResourceURLs, want[0].NonResourceURLs) ||
		!slices.Equal(role.Rules[0].Verbs, want[0].Verbs) || len(role.Rules[0].Resources) > 0 || len(role.Rules[0].APIGroups) > 0 {
		t.Errorf("ClusterRole %s rules = %+v, want %+v", metricsReader, role.Rules, want)
	}
}

// commonGrants is what configstamp may do in both overlays, as
// "<Kind> <name> <group>/<resource>[resourceNames]": "verbs". Changing an RBAC
// marker (kubebuilder:rbac) or config/rbac must change this table: RBAC is
// reviewed here.
var commonGrants = map[string]string{
	// Hash inputs (cluster-wide reads; the cache strips data to digests).
	"ClusterRole configstamp-manager-role core/configmaps": "get,list,watch",
	"ClusterRole configstamp-manager-role core/secrets":    "get,list,watch",
	"ClusterRole configstamp-manager-role core/namespaces": "get,list,watch",
	// The pods of a rollout being verified, read live (never cached, never written).
	"ClusterRole configstamp-manager-role core/pods": "list",
	// The few nodes a DaemonSet's rollout is not done on, read live (never
	// cached): a NotReady node's pods are not waited for.
	"ClusterRole configstamp-manager-role core/nodes": "get",
	// Workloads: the reconciler patches the template annotation.
	"ClusterRole configstamp-manager-role apps/deployments":     "get,list,patch,watch",
	"ClusterRole configstamp-manager-role apps/statefulsets":    "get,list,patch,watch",
	"ClusterRole configstamp-manager-role apps/daemonsets":      "get,list,patch,watch",
	"ClusterRole configstamp-manager-role events.k8s.io/events": "create,patch",
	// Own namespace: the hash key Secret and, in self mode, the TLS Secret.
	"Role configstamp-manager-role core/secrets": "create,update",
	// Own namespace: leader election.
	"Role configstamp-leader-election-role coordination.k8s.io/leases": "create,get,update",
	"Role configstamp-leader-election-role core/events":                "create,patch",
	// /metrics: each scrape's token reviewed and its access checked by the API server.
	"ClusterRole configstamp-metrics-auth-role authentication.k8s.io/tokenreviews":        "create",
	"ClusterRole configstamp-metrics-auth-role authorization.k8s.io/subjectaccessreviews": "create",
}

var selfGrants = map[string]string{
	"ClusterRole configstamp-webhook-config-role admissionregistration.k8s.io/mutatingwebhookconfigurations[" + mwcName + "]": "get,patch,update",
}

// TestRBACLeastPrivilege checks the exact grants of each overlay and the rules
// that hold whatever the table says: no delete of anything, no write to
// ConfigMaps, nothing on pods, Secrets written only through a Role in the own
// namespace, the webhook configuration written only by name.
func TestRBACLeastPrivilege(t *testing.T) {
	for name, tc := range overlays {
		t.Run(name, func(t *testing.T) {
			r := kustomize(t, tc.dir)
			checkMetricsReader(t, r)
			want := maps.Clone(commonGrants)
			if tc.self {
				maps.Copy(want, selfGrants)
			}
			got := map[string]string{}
			for _, kind := range []string{"ClusterRole", "Role"} {
				for _, o := range r.all(kind) {
					if kind == "ClusterRole" && o.GetName() == metricsReader {
						continue // the scrapers' role (checkMetricsReader), bound to nothing of configstamp's
					}
					role := typed[rbacv1.ClusterRole](t, o) // same rules as a Role
					if kind == "Role" && role.Namespace != ownNamespace {
						t.Errorf("Role %s is in namespace %q, want %q", role.Name, role.Namespace, ownNamespace)
					}
					if role.AggregationRule != nil {
						t.Errorf("%s %s aggregates other roles", kind, role.Name)
					}
					for _, rule := range role.Rules {
						checkRule(t, kind, role.Name, rule)
						for _, g := range rule.APIGroups {
							for _, res := range rule.Resources {
								key := fmt.Sprintf("%s %s %s/%s", kind, role.Name, groupName(g), res)
								if len(rule.ResourceNames) > 0 {
									key += "[" + strings.Join(rule.ResourceNames, ",") + "]"
								}
								verbs := append(strings.Split(got[key], ","), rule.Verbs...)
								verbs = slices.DeleteFunc(verbs, func(v string) bool { return v == "" })
								slices.Sort(verbs)
								got[key] = strings.Join(slices.Compact(verbs), ",")
							}
						}
					}
				}
			}
			for _, k := range sortedKeys(got) {
				if want[k] != got[k] {
					t.Errorf("%s: grants %q, want %q", k, got[k], want[k])
				}
			}
			for _, k := range sortedKeys(want) {
				if _, ok := got[k]; !ok {
					t.Errorf("%s: not granted, want %q", k, want[k])
				}
			}
		})
	}
}

func groupName(g string) string {
	if g == "" {
		return "core"
	}
	return g
}

func checkRule(t *testing.T, kind, name string, rule rbacv1.PolicyRule) {
	t.Helper()
	where := fmt.Sprintf("%s %s rule %+v", kind, name, rule)
	if len(rule.NonResourceURLs) > 0 {
		t.Errorf("%s: non-resource URLs", where)
	}
	write := false
	for _, v := range rule.Verbs {
		switch v {
		case "delete", "deletecollection", "*", "escalate", "bind", "impersonate":
			t.Errorf("%s: verb %q", where, v)
		case "create", "update", "patch":
			write = true
		}
	}
	for _, g := range rule.APIGroups {
		if g == "*" {
			t.Errorf("%s: every API group", where)
		}
	}
	for _, res := range rule.Resources {
		base, _, _ := strings.Cut(res, "/")
		switch {
		case res == "*" || base == "*":
			t.Errorf("%s: every resource", where)
		case base == "pods" && (res != "pods" || !slices.Equal(rule.Verbs, []string{"list"})):
			t.Errorf("%s: configstamp only lists pods (those of a rollout it verifies); never a subresource (logs, exec, eviction), never a write", where)
		case base == "configmaps" && write:
			t.Errorf("%s: writes ConfigMaps", where)
		case base == "secrets" && write && kind != "Role":
			t.Errorf("%s: writes Secrets outside configstamp's own namespace", where)
		case base == "mutatingwebhookconfigurations" && (slices.Contains(rule.Verbs, "create") || len(rule.ResourceNames) == 0):
			t.Errorf("%s: MutatingWebhookConfigurations other than its own, or create", where)
		}
	}
}

// TestNamespaceIsWired changes only the namespace of each overlay and expects
// no trace of the old one: the webhook's excluded namespace, the Service
// reference, the inject-ca-from annotation, the certificate's names and the
// generated Role all follow.
func TestNamespaceIsWired(t *testing.T) {
	root := repoRoot(t)
	for name, tc := range overlays {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			if err := os.CopyFS(filepath.Join(tmp, "config"), os.DirFS(filepath.Join(root, "config"))); err != nil {
				t.Fatal(err)
			}
			kfile := filepath.Join(tmp, tc.dir, "kustomization.yaml")
			data, err := os.ReadFile(kfile)
			if err != nil {
				t.Fatal(err)
			}
			const from, to = "\nnamespace: " + ownNamespace + "\n", "\nnamespace: elsewhere\n"
			if !strings.Contains(string(data), from) {
				t.Fatalf("%s has no %q line", kfile, strings.TrimSpace(from))
			}
			if err := os.WriteFile(kfile, []byte(strings.Replace(string(data), from, to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			r := kustomize(t, filepath.Join(tmp, tc.dir))
			for i, line := range strings.Split(string(r.raw), "\n") {
				if strings.Contains(line, ownNamespace) {
					t.Errorf("line %d still names %s: %s", i+1, ownNamespace, strings.TrimSpace(line))
				}
			}
			mwc := getAs[admissionregistrationv1.MutatingWebhookConfiguration](t, r, "MutatingWebhookConfiguration", mwcName)
			for _, wh := range mwc.Webhooks {
				if got := wh.NamespaceSelector.MatchExpressions[0].Values; !slices.Equal(got, []string{"elsewhere", "kube-system"}) {
					t.Errorf("webhook %s excludes %v, want [elsewhere kube-system]", wh.Name, got)
				}
			}
		})
	}
}

// enableComponent copies config/ into a temporary directory and uncomments
// `- ../<component>` in overlay's kustomization.yaml, the way the component's
// comment tells a user to enable it; it returns the copied overlay directory.
func enableComponent(t *testing.T, overlay, component string) string {
	t.Helper()
	tmp := t.TempDir()
	if err := os.CopyFS(filepath.Join(tmp, "config"), os.DirFS(filepath.Join(repoRoot(t), "config"))); err != nil {
		t.Fatal(err)
	}
	kfile := filepath.Join(tmp, overlay, "kustomization.yaml")
	data, err := os.ReadFile(kfile)
	if err != nil {
		t.Fatal(err)
	}
	from, to := "  # - ../"+component+"\n", "  - ../"+component+"\n"
	if !strings.Contains(string(data), from) {
		t.Fatalf("%s/kustomization.yaml has no %q line to uncomment", overlay, strings.TrimSpace(from))
	}
	if err := os.WriteFile(kfile, []byte(strings.Replace(string(data), from, to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(tmp, overlay)
}

// containerPort returns the manager container's port named name (0 if none).
func containerPort(dep *appsv1.Deployment, name string) int32 {
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// TestPrometheus enables config/prometheus in each overlay the way its comment
// says and checks that the ServiceMonitor finds the metrics Service, the
// Service reaches the container port --metrics-bind-address serves, and the
// scrape is HTTPS with Prometheus's ServiceAccount token.
func TestPrometheus(t *testing.T) {
	for name, tc := range overlays {
		t.Run(name, func(t *testing.T) {
			if r := kustomize(t, tc.dir); r.counts()["ServiceMonitor"] != 0 {
				t.Fatalf("%s includes the ServiceMonitor; it needs the Prometheus Operator's CRDs and is opt-in", tc.dir)
			}
			r := kustomize(t, enableComponent(t, tc.dir, "prometheus"))
			if n := r.counts()["ServiceMonitor"]; n != 1 {
				t.Fatalf("%d ServiceMonitors, want 1", n)
			}
			sm := r.all("ServiceMonitor")[0]
			if sm.GetNamespace() != ownNamespace || !strings.HasPrefix(sm.GetName(), "configstamp-") {
				t.Errorf("ServiceMonitor %s/%s: want namespace %s and the configstamp- prefix", sm.GetNamespace(), sm.GetName(), ownNamespace)
			}
			var smSpec struct {
				Selector  metav1.LabelSelector `json:"selector"`
				Endpoints []struct {
					Port            string `json:"port"`
					Path            string `json:"path"`
					Scheme          string `json:"scheme"`
					BearerTokenFile string `json:"bearerTokenFile"`
					TLSConfig       *struct {
						InsecureSkipVerify bool `json:"insecureSkipVerify"`
					} `json:"tlsConfig"`
				} `json:"endpoints"`
			}
			spec, _ := sm.Object["spec"].(map[string]any)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &smSpec); err != nil {
				t.Fatal(err)
			}
			sel, err := metav1.LabelSelectorAsSelector(&smSpec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			dep := getAs[appsv1.Deployment](t, r, "Deployment", deployment)
			var metrics *corev1.Service
			for _, o := range r.all("Service") {
				if s := typed[corev1.Service](t, o); sel.Matches(labels.Set(s.Labels)) {
					if metrics != nil {
						t.Errorf("ServiceMonitor selects Services %s and %s", metrics.Name, s.Name)
					}
					metrics = s
				}
			}
			if metrics == nil {
				t.Fatalf("ServiceMonitor selector %v matches no Service", smSpec.Selector)
			}
			if !labels.SelectorFromSet(metrics.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) {
				t.Errorf("metrics Service %s does not select the manager pods", metrics.Name)
			}
			if len(smSpec.Endpoints) != 1 || smSpec.Endpoints[0].Path != "/metrics" || len(metrics.Spec.Ports) != 1 ||
				metrics.Spec.Ports[0].Name != smSpec.Endpoints[0].Port || metrics.Spec.Ports[0].TargetPort.String() != "metrics" {
				t.Fatalf("ServiceMonitor endpoints %+v do not reach Service port %+v → container port metrics", smSpec.Endpoints, metrics.Spec.Ports)
			}
			// The container port named metrics is the one --metrics-bind-address serves.
			bind, _ := argValue(dep.Spec.Template.Spec.Containers[0].Args, "metrics-bind-address")
			if port := containerPort(dep, "metrics"); port == 0 || bind != fmt.Sprintf(":%d", port) {
				t.Errorf("container port metrics = %d, --metrics-bind-address=%q: want the same port", port, bind)
			}
			if p := metrics.Spec.Ports[0].Port; p != containerPort(dep, "metrics") {
				t.Errorf("metrics Service port %d, want the container port %d (kubebuilder's 8443)", p, containerPort(dep, "metrics"))
			}
			// HTTPS with the token of Prometheus's ServiceAccount, which the
			// metrics server reviews with the API server.
			ep := smSpec.Endpoints[0]
			if ep.Scheme != "https" || ep.BearerTokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" || ep.TLSConfig == nil {
				t.Errorf("ServiceMonitor endpoint %+v: want scheme https, the ServiceAccount token as bearer token and a tlsConfig", ep)
			}
		})
	}
}

// TestNetworkPolicy enables config/network-policy in each overlay and checks
// that its policies select the manager pods, open the webhook port to any
// source (the API server is rarely a pod), and open the metrics port only to
// namespaces labelled metrics=enabled. Named ports must be the container's.
func TestNetworkPolicy(t *testing.T) {
	for name, tc := range overlays {
		t.Run(name, func(t *testing.T) {
			if n := kustomize(t, tc.dir).counts()["NetworkPolicy"]; n != 0 {
				t.Fatalf("%s includes %d NetworkPolicies; they are opt-in", tc.dir, n)
			}
			r := kustomize(t, enableComponent(t, tc.dir, "network-policy"))
			dep := getAs[appsv1.Deployment](t, r, "Deployment", deployment)
			pods := labels.Set(dep.Spec.Template.Labels)
			// What each policy lets in, as "port from" (from "any" or a selector).
			allowed := map[string]string{}
			for _, o := range r.all("NetworkPolicy") {
				np := typed[networkingv1.NetworkPolicy](t, o)
				if np.Namespace != ownNamespace || !strings.HasPrefix(np.Name, "configstamp-") {
					t.Errorf("NetworkPolicy %s/%s: want namespace %s and the configstamp- prefix", np.Namespace, np.Name, ownNamespace)
				}
				sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
				if err != nil || sel.Empty() || !sel.Matches(pods) {
					t.Errorf("NetworkPolicy %s podSelector %v does not select the manager pods %v", np.Name, np.Spec.PodSelector, pods)
				}
				if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
					t.Errorf("NetworkPolicy %s policyTypes %v, want [Ingress] (egress is not restricted)", np.Name, np.Spec.PolicyTypes)
				}
				for _, rule := range np.Spec.Ingress {
					from := "any"
					if len(rule.From) > 0 {
						var peers []string
						for _, peer := range rule.From {
							if peer.NamespaceSelector == nil || peer.PodSelector != nil || peer.IPBlock != nil {
								t.Errorf("NetworkPolicy %s peer %+v: want a namespaceSelector only", np.Name, peer)
								continue
							}
							peers = append(peers, metav1.FormatLabelSelector(peer.NamespaceSelector))
						}
						from = strings.Join(peers, ";")
					}
					if len(rule.Ports) == 0 {
						t.Errorf("NetworkPolicy %s: an ingress rule for every port", np.Name)
					}
					for _, p := range rule.Ports {
						if p.Port == nil || containerPort(dep, p.Port.String()) == 0 {
							t.Errorf("NetworkPolicy %s port %v is not a named port of the manager container", np.Name, p.Port)
							continue
						}
						allowed[p.Port.String()] = from
					}
				}
			}
			want := map[string]string{"webhook-server": "any", "metrics": "metrics=enabled"}
			if !maps.Equal(allowed, want) {
				t.Errorf("NetworkPolicies let in %v (port: from), want %v", allowed, want)
			}
		})
	}
}
