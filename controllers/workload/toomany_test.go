package workload

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// countingReader counts the objects read through it.
type countingReader struct {
	client.Reader
	gets atomic.Int64
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

// projected is a pod template whose one projected volume references n ConfigMaps.
func projected(n int) *corev1.PodTemplateSpec {
	var sources []corev1.VolumeProjection
	for i := range n {
		sources = append(sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("ref-%04d", i)}}})
	}
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "all",
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}}}}
}

// A template over stamp.MaxReferences references costs no read at all; one
// at the bound is computed as usual.
func TestComputeTooManyReferences(t *testing.T) {
	for _, parallel := range []bool{false, true} {
		for _, n := range []int{stamp.MaxReferences, stamp.MaxReferences + 1} {
			t.Run(fmt.Sprintf("%d references, parallel %v", n, parallel), func(t *testing.T) {
				c := fake.NewClientBuilder().
					WithIndex(&corev1.ConfigMap{}, IndexHasSelector, IndexHasSelectorFunc).
					WithIndex(&corev1.Secret{}, IndexHasSelector, IndexHasSelectorFunc).Build()
				sources := &countingReader{Reader: c}
				r := &Resolver{Sources: sources, Index: c, Keys: stamp.NewKeyring([]byte("0123456789abcdef")), Parallel: parallel}
				comp, err := r.Compute(t.Context(), "ns", nil, projected(n))
				var tooMany *TooManyReferences
				if n > stamp.MaxReferences {
					if !errors.As(err, &tooMany) || tooMany.N != n {
						t.Fatalf("Compute = %v, %v; want *TooManyReferences{%d}", comp, err, n)
					}
					if got := sources.gets.Load(); got != 0 {
						t.Fatalf("%d objects read for a template over the bound; want none", got)
					}
					return
				}
				if err != nil || comp == nil || comp.Hash == "" {
					t.Fatalf("Compute = %v, %v; want a hash", comp, err)
				}
				if got := sources.gets.Load(); got != int64(n) {
					t.Fatalf("%d objects read, want %d", got, n)
				}
			})
		}
	}
}
