package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// KwokStagesHolding writes a copy of kwok's stages (bin/kwok-stages.yaml)
// whose pod-ready stage skips pods stamped with one of hashes and pods on
// node, as an application would crash on a bad config, and returns its path
// (for Config.KwokStages).
func KwokStagesHolding(hashes []string, node string) (string, error) {
	bin := os.Getenv("CONFIGSTAMP_BIN")
	if bin == "" {
		wd, _ := os.Getwd()
		bin = filepath.Join(wd, "..", "..", "bin")
	}
	data, err := os.ReadFile(filepath.Join(bin, "kwok-stages.yaml"))
	if err != nil {
		return "", fmt.Errorf("reading kwok stages (run make controlplane): %w", err)
	}
	docs := strings.Split(string(data), "\n---")
	found := false
	for i, doc := range docs {
		var stage map[string]any
		if err := yaml.Unmarshal([]byte(doc), &stage); err != nil || stage == nil {
			continue
		}
		meta, _ := stage["metadata"].(map[string]any)
		if meta["name"] != "pod-ready" {
			continue
		}
		sel := stage["spec"].(map[string]any)["selector"].(map[string]any)
		exprs, _ := sel["matchExpressions"].([]any)
		values := make([]any, len(hashes))
		for i, h := range hashes {
			values[i] = h
		}
		sel["matchExpressions"] = append(exprs, map[string]any{
			"key":      `.metadata.annotations["configstamp.io/config-hash"]`,
			"operator": "NotIn", "values": values,
		}, map[string]any{
			"key": ".spec.nodeName", "operator": "NotIn", "values": []any{node},
		})
		out, err := yaml.Marshal(stage)
		if err != nil {
			return "", err
		}
		docs[i] = "\n" + string(out)
		found = true
	}
	if !found {
		return "", fmt.Errorf("no pod-ready stage in kwok's stages")
	}
	f, err := os.CreateTemp("", "kwok-stages-*.yaml")
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(strings.Join(docs, "\n---")); err != nil {
		_ = f.Close()
		return "", err
	}
	return f.Name(), f.Close()
}

// MainHolding is Main with kwok's stages holding pods stamped with one of
// held, and pods on node (KwokStagesHolding).
func MainHolding(m *testing.M, env **Env, cfg Config, held []string, node string) int {
	stages, err := KwokStagesHolding(held, node)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.KwokStages = stages
	return Main(m, env, cfg)
}

// StampOf is the stamp, made with key, of a workload in ns with spec when the
// ConfigMaps hold cms: what a test computes in advance to hold its pods.
func StampOf(key []byte, ns string, spec corev1.PodSpec, cms ...*corev1.ConfigMap) string {
	refs, _ := stamp.WorkloadRefs(nil, &spec)
	sources := map[stamp.ObjectRef]stamp.Source{}
	for _, cm := range cms {
		src := stamp.SourceFromConfigMap(cm)
		sources[src.Ref] = src
	}
	return stamp.NewHasher(key).Compute(ns, refs, sources).Hash
}
