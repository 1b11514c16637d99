package cmrun

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// dataDir is the symlink the kubelet swaps to publish a new version of a
// volume's files (k8s.io/kubernetes/pkg/volume/util.AtomicWriter).
const dataDir = "..data"

// WriteAtomic publishes files (name → content) in dir the way the kubelet
// updates a Secret volume: the files go into a new timestamped directory, the
// ..data symlink is replaced by a rename (atomic: a reader sees the old set or
// the new set, never a mix), every name is a symlink to ..data/name, names no
// longer present are removed, and the previous directory is deleted. Files are
// mode 0644, the kubelet's default for Secret volumes.
func WriteAtomic(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	oldTarget, _ := os.Readlink(filepath.Join(dir, dataDir))
	tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(tsDir, name), content, 0o644); err != nil {
			return err
		}
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return err
	}
	tmpLink := filepath.Join(dir, dataDir+"_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(tsDir), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataDir)); err != nil {
		return err
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join(dataDir, name), link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, keep := files[e.Name()]; !keep && e.Name()[0] != '.' {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if oldTarget != "" && oldTarget != filepath.Base(tsDir) {
		return os.RemoveAll(filepath.Join(dir, oldTarget))
	}
	return nil
}

// Write is one publication of a Secret's data by a SecretVolume.
type Write struct {
	At              time.Time
	ResourceVersion string
	Data            map[string][]byte
}

// SecretVolume keeps a directory in step with one Secret, as the kubelet keeps
// a pod's Secret volume: it watches the Secret and, whenever its data changes,
// publishes every key as a file with WriteAtomic. (The kubelet only notices a
// change at its next periodic volume sync, up to a minute or so later; this
// writes at once.) A deleted Secret leaves the files as they are.
type SecretVolume struct {
	Dir       string
	Namespace string
	Name      string

	log    logr.Logger
	mu     sync.Mutex
	writes []Write
	err    error
}

// MountSecret starts a SecretVolume for namespace/name in dir. The first
// publication happens once the Secret exists; until then dir is left alone.
func MountSecret(ctx context.Context, cs kubernetes.Interface, namespace, name, dir string, log logr.Logger) (*SecretVolume, error) {
	v := &SecretVolume{Dir: dir, Namespace: namespace, Name: name, log: log.WithName("secret-volume").WithValues("secret", namespace+"/"+name)}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	inf := factory.Core().V1().Secrets().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    v.observe,
		UpdateFunc: func(_, obj any) { v.observe(obj) },
	})
	if err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	go func() { <-ctx.Done(); factory.Shutdown() }()
	return v, nil
}

func (v *SecretVolume) observe(obj any) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if n := len(v.writes); n > 0 && maps.EqualFunc(v.writes[n-1].Data, s.Data, slices.Equal) {
		return
	}
	if err := WriteAtomic(v.Dir, s.Data); err != nil {
		v.err = fmt.Errorf("publishing Secret %s/%s resourceVersion %s in %s: %w", s.Namespace, s.Name, s.ResourceVersion, v.Dir, err)
		v.log.Error(err, "publishing the Secret's files")
		return
	}
	w := Write{At: time.Now(), ResourceVersion: s.ResourceVersion, Data: maps.Clone(s.Data)}
	v.writes = append(v.writes, w)
	v.log.Info("published the Secret's files", "resourceVersion", s.ResourceVersion, "keys", slices.Sorted(maps.Keys(s.Data)))
}

// Writes returns the publications so far, oldest first, and the last error.
func (v *SecretVolume) Writes() ([]Write, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.writes), v.err
}
