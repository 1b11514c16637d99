package scope

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// installation is one configstamp with its own names.
type installation struct {
	name       string
	namespaces []string
}

func (i installation) args() []string {
	return []string{
		"--watch-namespaces=" + i.namespaces[0] + "," + i.namespaces[1],
		"--leader-election-id=configstamp-" + i.name,
		"--webhook-config-name=configstamp-" + i.name,
		"--hash-key-secret=configstamp-" + i.name + "-hash-key",
		"--tls-secret=configstamp-" + i.name + "-webhook-tls",
	}
}

// stampLog records every stamp each Deployment's template carried, in order,
// from a watch: a flip (a stamp that comes back, or an extra change) shows.
type stampLog struct {
	mu  sync.Mutex
	seq map[string][]string
}

func (l *stampLog) add(d *appsv1.Deployment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := d.Namespace + "/" + d.Name
	h := framework.TemplateHash(d)
	if s := l.seq[key]; len(s) == 0 || s[len(s)-1] != h {
		l.seq[key] = append(s, h)
	}
}

func (l *stampLog) get(key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seq[key])
}

// TestTwoInstallations: two configstamps on disjoint namespace sets, each with
// its own lease, webhook configuration, hash key and TLS Secret. 10 changes on
// each side: every workload rolls exactly once per change (one new ReplicaSet
// each), and no stamp ever flips (a watch on the templates sees exactly one
// new stamp per change, never an old one again).
func TestTwoInstallations(t *testing.T) {
	installs := []installation{
		{name: "left", namespaces: []string{"left-1", "left-2"}},
		{name: "right", namespaces: []string{"right-1", "right-2"}},
	}
	var all []string
	for _, in := range installs {
		for _, ns := range in.namespaces {
			namespace(t, ns, nil)
			all = append(all, ns)
		}
	}
	log := &stampLog{seq: map[string][]string{}}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.AppsV1().Deployments("").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && ev.Type != watch.Deleted && slices.Contains(all, d.Namespace) {
				log.add(d)
			}
		}
	}()

	procs := map[string]*framework.Process{}
	for _, in := range installs {
		procs[in.name] = startConfigstamp(t, in.name, in.args()...)
		webhookSelector(t, "configstamp-"+in.name) // deleted when the test ends
	}

	deps := map[string]*appsv1.Deployment{}
	for _, ns := range all {
		deps[ns] = env.App(t, ns)
		if framework.TemplateHash(deps[ns]) == "" {
			t.Fatalf("%s not stamped at CREATE", ns)
		}
	}
	waitRolled := func(round int) {
		for _, ns := range all {
			d := deps[ns].DeepCopy()
			framework.Eventually(t, 90*time.Second, func() (bool, string) {
				env.Get(t, d)
				n := len(env.ReplicaSets(t, ns, d.Name))
				return n == round+1 && framework.RolledOut(d), fmt.Sprintf("%s: %d ReplicaSets, rolled out %v (round %d)", ns, n, framework.RolledOut(d), round)
			})
		}
	}
	waitRolled(0)
	const changes = 10
	for round := 1; round <= changes; round++ {
		for _, ns := range all {
			changeConfig(t, ns, strconv.Itoa(round+1))
		}
		waitRolled(round)
	}
	for _, in := range installs {
		procs[in.name].WaitIdle(t, map[string]float64{})
	}

	for _, ns := range all {
		d := deps[ns].DeepCopy()
		env.Get(t, d)
		seq := log.get(ns + "/app")
		rs := len(env.ReplicaSets(t, ns, d.Name))
		t.Logf("%s/app: %d ReplicaSets, %d stamps seen by the watch", ns, rs, len(seq))
		if rs != changes+1 {
			t.Errorf("%s/app: %d ReplicaSets after %d changes, want %d", ns, rs, changes, changes+1)
		}
		if len(seq) != changes+1 {
			t.Errorf("%s/app: stamps %v, want the CREATE stamp and one per change (%d)", ns, seq, changes+1)
		}
		sorted := slices.Clone(seq)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) != len(seq) {
			t.Errorf("%s/app: a stamp came back (flip): %v", ns, seq)
		}
		if len(seq) > 0 && framework.TemplateHash(d) != seq[len(seq)-1] {
			t.Errorf("%s/app: stamp %q is not the last one seen", ns, framework.TemplateHash(d))
		}
	}

	// Each installation kept its own lease, key and TLS Secret.
	keys := map[string]bool{}
	for _, in := range installs {
		lease := &coordinationv1.Lease{}
		lease.Namespace, lease.Name = framework.OwnNamespace, "configstamp-"+in.name
		env.Get(t, lease)
		for _, name := range []string{"configstamp-" + in.name + "-hash-key", "configstamp-" + in.name + "-webhook-tls"} {
			s := &corev1.Secret{}
			s.Namespace, s.Name = framework.OwnNamespace, name
			env.Get(t, s)
			if k := string(s.Data["key"]); k != "" {
				keys[k] = true
			}
		}
	}
	if len(keys) != len(installs) {
		t.Errorf("%d distinct hash keys for %d installations", len(keys), len(installs))
	}
	// Neither used the default names.
	for _, name := range []string{"configstamp-hash-key", "configstamp-webhook-tls"} {
		s := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: framework.OwnNamespace, Name: name}, s); err == nil {
			t.Errorf("Secret %s exists: a flag was not honoured", name)
		}
	}
}

// TestInstallationsDoNotShareABudget: two installations split by
// --namespace-selector (team=x, team=y), a budget of 1 each and, to make the
// point without the seal's help, one hash key Secret between them (a record
// one installation sealed verifies for the other). A rollout stuck in X's
// namespace (its pods can never be scheduled) holds X's only slot; a change in
// Y's namespace must still roll at once: Y counts only its own namespaces.
func TestInstallationsDoNotShareABudget(t *testing.T) {
	common := []string{"--max-concurrent-rollouts=1", "--halt-on-failure=true", "--progress-deadline=5m",
		"--hash-key-secret=configstamp-teams-hash-key"}
	procs := map[string]*framework.Process{}
	for _, team := range []string{"x", "y"} {
		namespace(t, "team-"+team, map[string]string{"team": team})
		procs[team] = startConfigstamp(t, "team-"+team, append(common,
			"--namespace-selector=team="+team,
			"--leader-election-id=configstamp-team-"+team,
			"--webhook-config-name=configstamp-team-"+team,
			"--tls-secret=configstamp-team-"+team+"-webhook-tls")...)
		webhookSelector(t, "configstamp-team-"+team)
	}
	// X: a Deployment whose pods are never scheduled, so its rollout never ends.
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")
	spec.NodeSelector = map[string]string{"no-such-label": "anywhere"}
	stuck := framework.Deployment("team-x", "stuck", framework.OptIn, spec)
	env.Apply(t, framework.ConfigMap("team-x", "app-config", map[string]string{"a": "1"}, nil), stuck)
	before := env.WaitTemplateHash(t, stuck, "")
	changeConfig(t, "team-x", "2")
	env.WaitTemplateHash(t, stuck, before)
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		v, err := procs["x"].Metrics("configstamp_rollout_slots_in_use")
		return err == nil && v == 1, fmt.Sprintf("X: %v slots in use (%v), want its stuck rollout's", v, err)
	})

	app := env.App(t, "team-y")
	framework.Eventually(t, time.Minute, func() (bool, string) {
		env.Get(t, app)
		return framework.RolledOut(app), "team-y/app not rolled out"
	})
	stamped := framework.TemplateHash(app)
	changed := time.Now()
	changeConfig(t, "team-y", "2")
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		env.Get(t, app)
		return framework.TemplateHash(app) != stamped, "Y's Deployment not stamped: its change waits for a slot"
	})
	waited := time.Since(changed)
	t.Logf("X's stuck rollout holds X's only slot; Y's change was stamped %v after it was applied", waited.Round(time.Millisecond))
	if waited > 10*time.Second {
		t.Errorf("Y waited %v for its only slot while X's rollout was stuck", waited)
	}
	if v, err := procs["y"].Metrics("configstamp_rollout_slots_in_use"); err != nil || v > 1 {
		t.Errorf("Y counts %v slots in use (%v): X's rollout counted against it", v, err)
	}
	env.Get(t, stuck)
	if a := stuck.Annotations; rollout.Read(a).State != rollout.Rolling {
		t.Errorf("X's stuck rollout is not open any more (%q): the test proved nothing", a[rollout.AnnotationState])
	}
}
