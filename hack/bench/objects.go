package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// fixture is a population of objects: per-workload ConfigMaps and Secrets,
// shared ConfigMaps in every namespace, and opted-in Deployments. Object i
// lives in namespace i mod len(namespaces). Deployment i mounts ConfigMap i
// (volume, all keys), takes Secret i (envFrom) and one key (k0) of shared
// ConfigMap i mod shared (configMapKeyRef).
type fixture struct {
	namespaces  []string
	configMaps  int
	secrets     int
	shared      int // per namespace
	deployments int
	size        int // bytes of data per ConfigMap/Secret
	keys        int
	// noop: the Deployments are not opted in to configstamp but labelled for
	// the no-op webhook (floorPass).
	noop bool
	// pinned: the Deployments are pinned (configstamp.io/pin, runPin).
	pinned bool
	// replicas of each Deployment: 0 unless a scenario needs pods (runWave).
	replicas int32
}

// sharedKey is the key of a shared ConfigMap that every Deployment references.
const sharedKey = "k0"

func namespaces(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	if n == 1 {
		out[0] = prefix
	}
	return out
}

func (f *fixture) namespace(i int) string     { return f.namespaces[i%len(f.namespaces)] }
func (f *fixture) configMapName(i int) string { return fmt.Sprintf("cm-%05d", i) }
func (f *fixture) secretName(i int) string    { return fmt.Sprintf("secret-%05d", i) }
func (f *fixture) sharedName(j int) string    { return fmt.Sprintf("shared-%d", j) }
func (f *fixture) deploymentName(i int) string {
	return fmt.Sprintf("app-%05d", i)
}

// data is size bytes of pseudo-random letters in f.keys keys, different for
// every seed (objects and versions).
func (f *fixture) data(seed string) map[string]string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(seed))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x5eed))
	per := f.size / f.keys
	out := make(map[string]string, f.keys)
	for k := range f.keys {
		buf := make([]byte, per)
		for i := 0; i < per; i += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], rng.Uint64())
			for j := 0; j < 8 && i+j < per; j++ {
				buf[i+j] = 'a' + w[j]%26
			}
		}
		out[fmt.Sprintf("k%d", k)] = string(buf)
	}
	return out
}

func (f *fixture) configMap(ns, name, version string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       f.data(ns + "/" + name + "/" + version),
	}
}

func (f *fixture) secret(ns, name string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range f.data(ns + "/" + name) {
		s.Data[k] = []byte(v)
	}
	return s
}

// deployment is Deployment i with replicas 0 (see the notes).
func (f *fixture) deployment(i int) *appsv1.Deployment {
	name := f.deploymentName(i)
	pod := map[string]string{"app": name}
	spec := corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1",
			Env: []corev1.EnvVar{{Name: "SHARED", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: f.sharedName(i % f.shared)}, Key: sharedKey}}}},
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: f.secretName(i)}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/config"}},
		}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: f.configMapName(i)}}}}},
		TerminationGracePeriodSeconds: ptr.To[int64](0),
	}
	labels := map[string]string{stamp.LabelEnabled: "true"}
	if f.noop {
		labels = map[string]string{noopLabel: "true"}
	}
	var annotations map[string]string
	if f.pinned {
		annotations = map[string]string{pin.AnnotationPin: "true"}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace(i), Name: name, Labels: labels, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(f.replicas),
			Selector: &metav1.LabelSelector{MatchLabels: pod},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod}, Spec: spec},
		},
	}
}

// createSources creates the namespaces, shared ConfigMaps, ConfigMaps and
// Secrets, workers at a time, and returns how long that took.
func (f *fixture) createSources(ctx context.Context, e *env, workers int) (time.Duration, error) {
	began := time.Now()
	for _, ns := range f.namespaces {
		if err := createObject(ctx, e.client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return 0, err
		}
	}
	shared := f.shared * len(f.namespaces)
	total := shared + f.configMaps + f.secrets
	err := parallel(ctx, "ConfigMaps and Secrets", total, workers, func(ctx context.Context, i int) error {
		switch {
		case i < shared:
			return createObject(ctx, e.client, f.configMap(f.namespaces[i%len(f.namespaces)], f.sharedName(i/len(f.namespaces)), "v1"))
		case i < shared+f.configMaps:
			i -= shared
			return createObject(ctx, e.client, f.configMap(f.namespace(i), f.configMapName(i), "v1"))
		default:
			i -= shared + f.configMaps
			return createObject(ctx, e.client, f.secret(f.namespace(i), f.secretName(i)))
		}
	})
	e.inventory.configMaps += shared + f.configMaps
	e.inventory.secrets += f.secrets
	return time.Since(began), err
}

// createDeployments creates the Deployments, workers at a time; each creation
// passes configstamp's webhook when it runs. It returns each creation's latency.
func (f *fixture) createDeployments(ctx context.Context, e *env, workers int) ([]time.Duration, error) {
	latencies := make([]time.Duration, f.deployments)
	err := parallel(ctx, "Deployments", f.deployments, workers, func(ctx context.Context, i int) error {
		began := time.Now()
		err := createObject(ctx, e.client, f.deployment(i))
		latencies[i] = time.Since(began)
		return err
	})
	e.inventory.deployments += f.deployments
	return latencies, err
}

// updateConfigMap gives a ConfigMap new data and returns when the API server
// has answered.
func (f *fixture) updateConfigMap(ctx context.Context, e *env, ns, name, version string) (time.Time, error) {
	cm := &corev1.ConfigMap{}
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		return time.Time{}, err
	}
	cm.Data = f.data(ns + "/" + name + "/" + version)
	if err := e.client.Update(ctx, cm); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// createObject creates obj, retrying what a busy API server may answer.
// An object that already exists counts as created.
func createObject(ctx context.Context, c client.Client, obj client.Object) error {
	for attempt := 1; ; attempt++ {
		err := c.Create(ctx, obj)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		retriable := apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) ||
			apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
			transportError(err)
		if !retriable || attempt == 5 {
			return fmt.Errorf("creating %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
		}
		obj.SetResourceVersion("")
		select { // back off before retrying
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

// transportError reports whether err came without an answer from the API
// server: a reset stream (an API server past its request timeout aborts the
// stream, HTTP/2 INTERNAL_ERROR) or a cut connection. The request may have
// been applied; createObject's retry then finds the object and counts it.
func transportError(err error) bool {
	var status apierrors.APIStatus
	return !errors.As(err, &status) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// parallel runs fn(0..n-1) on workers goroutines; the first error cancels the rest.
func parallel(ctx context.Context, what string, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		return fmt.Errorf("creating %s: %w", what, err)
	}
	return nil
}

// waitRecorded polls until configstamp has recorded a hash on every
// Deployment of the fixture (annotation applied-hash: the webhook writes it
// with the template stamp at CREATE, the reconciler alone on a workload it
// finds unstamped) and returns how many carry no template stamp.
func (f *fixture) waitRecorded(ctx context.Context, e *env, timeout time.Duration) (unstamped int, err error) {
	var recorded int
	err = poll(ctx, "a hash recorded on every Deployment ("+stamp.AnnotationAppliedHash+")", timeout, 500*time.Millisecond, func() (bool, string, error) {
		recorded, unstamped = 0, 0
		for _, ns := range f.namespaces {
			list := &appsv1.DeploymentList{}
			if err := e.client.List(ctx, list, client.InNamespace(ns)); err != nil {
				return false, "", err
			}
			for _, d := range list.Items {
				if d.Annotations[stamp.AnnotationAppliedHash] != "" {
					recorded++
				}
				if d.Spec.Template.Annotations[stamp.AnnotationHash] == "" {
					unstamped++
				}
			}
		}
		return recorded >= f.deployments, fmt.Sprintf("%d of %d", recorded, f.deployments), nil
	})
	return unstamped, err
}

// setup creates the fixture with configstamp running and waits until every
// Deployment is stamped and configstamp has nothing left to do.
func (f *fixture) setup(ctx context.Context, e *env, cfg *config) error {
	if _, err := f.createSources(ctx, e, cfg.workers); err != nil {
		return err
	}
	if _, err := f.createDeployments(ctx, e, cfg.deployWorkers); err != nil {
		return err
	}
	if _, err := f.waitRecorded(ctx, e, 5*time.Minute); err != nil {
		return err
	}
	return f.waitSettled(ctx, e, 5*time.Minute)
}

// waitSettled polls until every Deployment of the fixture reports its rollout
// complete (what frees configstamp's rollout slot) and configstamp is idle.
func (f *fixture) waitSettled(ctx context.Context, e *env, timeout time.Duration) error {
	err := poll(ctx, "rollouts followed to completion", timeout, 200*time.Millisecond, func() (bool, string, error) {
		deps, err := f.list(ctx, e)
		if err != nil {
			return false, "", err
		}
		rolling := 0
		for _, d := range deps {
			if !complete(d) {
				rolling++
			}
		}
		return rolling == 0, fmt.Sprintf("%d Deployments still rolling", rolling), nil
	})
	if err != nil {
		return err
	}
	return e.configstamp.waitIdle(ctx, timeout)
}

// list returns every Deployment of the fixture's namespaces.
func (f *fixture) list(ctx context.Context, e *env) ([]appsv1.Deployment, error) {
	var out []appsv1.Deployment
	for _, ns := range f.namespaces {
		list := &appsv1.DeploymentList{}
		if err := e.client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		out = append(out, list.Items...)
	}
	return out, nil
}

// complete reports whether d's status shows its current generation rolled out.
func complete(d appsv1.Deployment) bool {
	s, want := d.Status, int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want
}
