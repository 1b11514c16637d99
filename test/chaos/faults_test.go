package chaos

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
)

func killLeader(t *testing.T, r *run) {
	l := leader(t)
	t.Logf("killing the leader %s", l.LogPath)
	r.sup.kill(l)
	r.state["killed"] = l
}

func restartKilled(t *testing.T, r *run) {
	if p, ok := r.state["killed"].(*framework.Process); ok {
		r.sup.start(t, p)
	}
}

func crashAPIServer(t *testing.T, _ *run) {
	began := time.Now()
	if err := env.CP.CrashAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver killed and ready again after %v", time.Since(began).Round(time.Millisecond))
}

func compactEtcd(t *testing.T, _ *run) {
	rev, err := env.CP.CompactEtcd(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd compacted at revision %d and defragmented", rev)
}

// webhookOutage: both replicas down while 20 opted-in workloads are created
// (admitted unstamped: the webhook fails open) and 10 workloads' own
// ConfigMaps change; then both come back. The 10 roll once each; the 20 new
// ones get a baseline and roll nothing.
func webhookOutage(t *testing.T, r *run) {
	for _, p := range env.Replicas {
		r.sup.kill(p)
	}
	var created []client.Object
	for i := range 20 {
		name := fmt.Sprintf("new-%02d-%02d", r.index, i)
		d := framework.Deployment(r.ns, name, framework.OptIn, workloadSpec("own-"+name))
		created = append(created, framework.ConfigMap(r.ns, "own-"+name, map[string]string{"v": "0"}, nil), d)
		r.extra = append(r.extra, d)
	}
	env.Apply(t, created...)
	for i := range 10 {
		o := r.objs[i]
		env.Apply(t, framework.ConfigMap(r.ns, "own-"+o.GetName(), map[string]string{"v": "outage-" + strconv.Itoa(r.index)}, nil))
		r.required[key(o)] = 1
	}
	for _, p := range env.Replicas {
		r.sup.start(t, p)
	}
	// The new workloads are healed by baselines: a record, no stamp.
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		for _, o := range r.extra {
			env.Get(t, o)
			if o.GetAnnotations()["configstamp.io/applied-hash"] == "" {
				return false, o.GetName() + " has no baseline yet"
			}
		}
		return true, ""
	})
	r.waitComplete(t, r.extra, 3*time.Minute)
	r.fault.restore = func(t *testing.T, r *run) {
		for _, o := range r.extra {
			env.Kubectl(t, "", "-n", r.ns, "delete", "deployment", o.GetName(), "--wait=false")
			env.Kubectl(t, "", "-n", r.ns, "delete", "configmap", "own-"+o.GetName(), "--wait=false")
		}
	}
}

// prepareDoomed creates a second namespace with ten workloads of its own.
func prepareDoomed(t *testing.T, r *run) {
	ns := fmt.Sprintf("doomed-%02d", r.index)
	env.Kubectl(t, "", "create", "namespace", ns)
	objs := []client.Object{framework.ConfigMap(ns, "shared", map[string]string{"v": "0"}, nil),
		framework.Secret(ns, "creds", map[string]string{"token": "t0"})}
	var deps []client.Object
	for i := range 10 {
		name := fmt.Sprintf("d-%02d", i)
		d := framework.Deployment(ns, name, framework.OptIn, workloadSpec("own-"+name))
		objs = append(objs, framework.ConfigMap(ns, "own-"+name, map[string]string{"v": "0"}, nil), d)
		deps = append(deps, d)
	}
	env.Apply(t, objs...)
	r.waitComplete(t, deps, 2*time.Minute)
	// Its wave starts with the main one.
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"v": "1"}, nil))
	r.state["doomed"] = ns
}

func deleteDoomed(t *testing.T, r *run) {
	ns := r.state["doomed"].(string)
	env.Kubectl(t, "", "delete", "namespace", ns, "--wait=false")
	t.Logf("namespace %s deleted mid-wave", ns)
}

// nodeChurn adds a node and drains the original one mid-wave; undoNodeChurn
// drains the new node back and removes it.
func nodeChurn(t *testing.T, r *run) {
	node := fmt.Sprintf("kwok-chaos-%02d", r.index)
	if err := env.CP.AddNode(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	r.state["node"] = node
	env.Kubectl(t, "", "drain", "kwok-node-0", "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=120s")
	t.Logf("node %s added, kwok-node-0 drained", node)
}

func undoNodeChurn(t *testing.T, r *run) {
	env.Kubectl(t, "", "uncordon", "kwok-node-0")
	if node, ok := r.state["node"].(string); ok {
		env.Kubectl(t, "", "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=120s")
		env.Kubectl(t, "", "delete", "node", node)
	}
	r.waitComplete(t, r.objs, 3*time.Minute)
}

// startWriter updates the workloads' replicas and labels every 200 ms, as an
// HPA or a GitOps tool would, until stopWriter.
func startWriter(t *testing.T, r *run) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	writes := 0
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for j := range 5 {
				o := r.objs[(i*5+j)%len(r.objs)]
				patch := fmt.Sprintf(`{"metadata":{"labels":{"chaos/writer":"%d"}}}`, i)
				if _, ok := o.(*appsv1.DaemonSet); !ok {
					patch = fmt.Sprintf(`{"metadata":{"labels":{"chaos/writer":"%d"}},"spec":{"replicas":%d}}`, i, 1+i%2)
				}
				target := o.DeepCopyObject().(client.Object)
				if err := env.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, []byte(patch))); err == nil {
					writes++
				}
			}
		}
	})
	// The writer runs until the whole wave is stamped (run.converge stops it).
	r.state["stop"] = func() int { cancel(); wg.Wait(); return writes }
}

// stopWriter puts the replicas back.
func stopWriter(t *testing.T, r *run) {
	for _, o := range r.objs {
		if _, ok := o.(*appsv1.DaemonSet); ok {
			continue
		}
		if err := env.Client.Patch(t.Context(), o, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))); err != nil {
			t.Fatal(err)
		}
	}
	r.waitComplete(t, r.objs, 3*time.Minute)
}

// cutLeader cuts the leader off from the API server, as a network partition
// of its node would: its API proxy drops every byte both ways, and the API
// server's webhook calls go to the other replica only. client-go gives the
// lease up after --leader-elect-renew-deadline, configstamp then exits, and a
// follower takes the lease only once --leader-elect-lease-duration has passed
// since the last renewal. The cut is healed as soon as the other replica
// leads: a replica still acting as leader would write now, and
// onlyTheLeaderWrote finds it in the audit log.
func cutLeader(t *testing.T, r *run) {
	l := leader(t)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: framework.OwnNamespace, Name: leaseName}}
	env.Get(t, lease)
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	cutAt := time.Now()
	l.API.Cut()
	env.Balancer.SetBackends(webhookAddrs(l)...)
	// Heal the moment another replica holds the lease: the cut one may still
	// be giving it up, and whatever it writes now is after the hand-over.
	var exited time.Duration
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited == 0 && l.Exited() {
			exited = time.Since(cutAt)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
			return false, nil
		}
		now := ptr.Deref(lease.Spec.HolderIdentity, "")
		return now != "" && now != holder, nil
	})
	if err != nil {
		t.Fatalf("no other replica took the lease after the leader was cut off: %v", err)
	}
	l.API.Heal()
	env.Balancer.SetBackends(webhookAddrs(nil)...)
	t.Logf("leader %s cut off from the API server; %s holds the lease %v later; the cut one had exited after %v (0: not yet)",
		l.LogPath, ptr.Deref(lease.Spec.HolderIdentity, ""), time.Since(cutAt).Round(time.Millisecond), exited.Round(time.Millisecond))
	r.state["cut"], r.state["cutAt"] = l, cutAt
}

// webhookAddrs are the replicas' webhook addresses, but that of except.
func webhookAddrs(except *framework.Process) []string {
	var out []string
	for _, p := range env.Replicas {
		if p != except {
			out = append(out, fmt.Sprintf("127.0.0.1:%d", p.WebhookPort))
		}
	}
	return out
}

// leaseName is configstamp's leader election Lease (--leader-election-id).
const leaseName = "configstamp.configstamp.io"

// workloadResources are what configstamp patches to roll a workload.
var workloadResources = map[string]bool{"deployments": true, "statefulsets": true, "daemonsets": true}

// onlyTheLeaderWrote reads the API server's audit log of the whole suite, in
// the order requests were received: every write configstamp's replicas made to
// a workload came from the replica whose lease write was the last to succeed
// before it. After cutLeader, the other replica took the lease and went on
// with the wave.
func onlyTheLeaderWrote(t *testing.T, r *run) {
	cut, cutAt := r.state["cut"].(*framework.Process), r.state["cutAt"].(time.Time)
	replica := map[string]bool{}
	for _, p := range env.Replicas {
		replica[p.SourceIP] = true
	}
	events := env.AuditEvents(t)
	slices.SortStableFunc(events, func(a, b framework.AuditEvent) int { return a.RequestReceived.Compare(b.RequestReceived) })
	holder, checked, afterTakeover := "", 0, 0
	var lastRenewal, tookOver time.Time
	for _, ev := range events {
		if !ev.Write() || len(ev.SourceIPs) == 0 || !replica[ev.SourceIPs[0]] || ev.ResponseStatus.Code >= 300 {
			continue
		}
		from := ev.SourceIPs[0]
		switch {
		case ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Name == leaseName:
			if ev.RequestReceived.Before(cutAt) && from == cut.SourceIP {
				lastRenewal = ev.RequestReceived
			}
			if tookOver.IsZero() && ev.RequestReceived.After(cutAt) && from != cut.SourceIP {
				tookOver = ev.RequestReceived
			}
			holder = from
		case workloadResources[ev.ObjectRef.Resource] && holder != "": // "": the log began after a kube-apiserver restart
			checked++
			if from != holder {
				t.Errorf("%s %s/%s/%s at %s came from %s, but %s held the lease", ev.Verb, ev.ObjectRef.Resource,
					ev.ObjectRef.Namespace, ev.ObjectRef.Name, ev.RequestReceived.Format(time.StampMicro), from, holder)
			}
			if !tookOver.IsZero() {
				afterTakeover++
			}
		}
	}
	if tookOver.IsZero() {
		t.Fatalf("the audit log shows no other replica taking the lease after the cut")
	}
	if afterTakeover == 0 {
		t.Errorf("the new leader wrote no workload after it took the lease: the check saw nothing of the wave's end")
	}
	t.Logf("audit: %d workload writes by the replicas checked against the lease holder (%d after the takeover); "+
		"the cut leader's last renewal %v before the cut, the lease taken over %v after it",
		checked, afterTakeover, cutAt.Sub(lastRenewal).Round(time.Millisecond), tookOver.Sub(cutAt).Round(time.Millisecond))
}
