package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	sharedworkload "github.com/configstamp/configstamp/controllers/workload"
)

// lastApplied is where `kubectl apply` keeps what it applied last.
const lastApplied = corev1.LastAppliedConfigAnnotation

// source is a ConfigMap or Secret as plan needs it: its annotations and its
// data as one map (data and binaryData; a Secret's stringData folded in).
// Values stay in memory, are only compared, and are never printed.
type source struct {
	ref         stamp.ObjectRef
	namespace   string
	annotations map[string]string
	data        map[string][]byte
}

func (s *source) stampSource() stamp.Source {
	if s == nil {
		return stamp.Source{}
	}
	switch s.ref.Kind {
	case stamp.KindSecret:
		return stamp.SourceFromSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.ref.Name, Annotations: s.annotations}, Data: s.data})
	default:
		return stamp.SourceFromConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.ref.Name, Annotations: s.annotations}, BinaryData: s.data})
	}
}

func fromConfigMap(cm *corev1.ConfigMap) *source {
	s := &source{ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: cm.Name}, namespace: cm.Namespace,
		annotations: cm.Annotations, data: map[string][]byte{}}
	for k, v := range cm.Data {
		s.data[k] = []byte(v)
	}
	maps.Copy(s.data, cm.BinaryData)
	return s
}

func fromSecret(sec *corev1.Secret) *source {
	s := &source{ref: stamp.ObjectRef{Kind: stamp.KindSecret, Name: sec.Name}, namespace: sec.Namespace,
		annotations: sec.Annotations, data: maps.Clone(sec.Data)}
	if s.data == nil {
		s.data = map[string][]byte{}
	}
	for k, v := range sec.StringData { // the API server folds stringData into data, stringData winning
		s.data[k] = []byte(v)
	}
	return s
}

// decodeSource reads a ConfigMap or Secret from its JSON; ok is false for other kinds.
func decodeSource(raw []byte) (*source, bool, error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return nil, false, err
	}
	if tm.APIVersion != "v1" {
		return nil, false, nil
	}
	switch tm.Kind {
	case "ConfigMap":
		cm := &corev1.ConfigMap{}
		if err := json.Unmarshal(raw, cm); err != nil {
			return nil, false, fmt.Errorf("while reading ConfigMap: %w", err)
		}
		return fromConfigMap(cm), true, nil
	case "Secret":
		s := &corev1.Secret{}
		if err := json.Unmarshal(raw, s); err != nil {
			return nil, false, fmt.Errorf("while reading Secret: %w", err)
		}
		return fromSecret(s), true, nil
	}
	return nil, false, nil
}

// readManifest reads every ConfigMap and Secret of a YAML or JSON stream
// (several documents, v1 Lists included); other kinds are returned by name.
func readManifest(r io.Reader) ([]*source, []string, error) {
	var out []*source
	var skipped []string
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var add func(raw json.RawMessage) error
	add = func(raw json.RawMessage) error {
		var head struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return err
		}
		if head.Kind == "List" || strings.HasSuffix(head.Kind, "List") && head.Items != nil {
			for _, item := range head.Items {
				if err := add(item); err != nil {
					return err
				}
			}
			return nil
		}
		s, ok, err := decodeSource(raw)
		if err != nil {
			return err
		}
		if !ok {
			skipped = append(skipped, head.Kind+"/"+head.Metadata.Name)
			return nil
		}
		out = append(out, s)
		return nil
	}
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("while reading the manifest: %w", err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		if err := add(raw); err != nil {
			return nil, nil, fmt.Errorf("while reading the manifest: %w", err)
		}
	}
	return out, skipped, nil
}

// applied is what the object becomes when file is applied over live with
// client-side `kubectl apply`: the file's keys and annotations are set, and
// the ones the last applied configuration had but the file lacks are removed;
// everything else live keeps. live nil: the object is created as in file.
func applied(live, file *source) (*source, error) {
	if live == nil {
		return file, nil
	}
	prev := &source{data: map[string][]byte{}}
	if raw := live.annotations[lastApplied]; raw != "" {
		p, ok, err := decodeSource([]byte(raw))
		if err != nil {
			return nil, fmt.Errorf("while reading %s of %s: %w", lastApplied, live.ref, err)
		}
		if ok {
			prev = p
		}
	}
	out := &source{ref: live.ref, namespace: live.namespace, annotations: maps.Clone(live.annotations), data: maps.Clone(live.data)}
	if out.annotations == nil {
		out.annotations = map[string]string{}
	}
	for k := range prev.data {
		if _, ok := file.data[k]; !ok {
			delete(out.data, k)
		}
	}
	maps.Copy(out.data, file.data)
	for k := range prev.annotations {
		if _, ok := file.annotations[k]; !ok {
			delete(out.annotations, k)
		}
	}
	maps.Copy(out.annotations, file.annotations)
	return out, nil
}

// planEntry is the verdict for one workload.
type planEntry struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Rolls  bool   `json:"rolls"`
	Reason string `json:"reason"`
	// Keys are the keys behind the verdict: the referenced keys that change
	// (rolls) or the unreferenced ones that do (does not roll). Names only.
	Keys []string `json:"keys,omitempty"`
	// NewSnapshot: the workload is pinned (pinned config) and its rollout
	// moves it to a new snapshot of the source.
	NewSnapshot bool `json:"newSnapshot,omitempty"`
	// Canary: the workload would be the canary of its change in its
	// namespace (rollout.Canaries): the first that rolls it in wave order
	// and has not turned canaries off. A change is key-precise: workloads
	// that reference other keys of the object roll another change, with a
	// canary of its own.
	Canary bool `json:"canary,omitempty"`
	// WaitsFor: the canary of its change it waits for (kind/name; absent:
	// it is the canary, has canaries off, or does not roll).
	WaitsFor string `json:"waitsFor,omitempty"`
	// CanaryPods: a canary Kubernetes cannot hold at one new pod (a
	// Recreate Deployment replaces all its pods; a DaemonSet replaces its
	// pods that are not available at once): how many pods it runs the
	// change on (workload.Status.CanaryPods); absent: one.
	CanaryPods int64 `json:"canaryPods,omitempty"`
	// place, idle, canaryOff and change: its wave order, whether it can
	// make no canary pod now, configstamp.io/canary, and the change it
	// rolls (workload.ChangeContent: equal for the workloads that roll the
	// same change).
	place      rollout.Place
	idle       bool
	canaryOff  bool
	change     rollout.Change
	references stamp.KeySet // what it references of the object, which makes its change
	rotation   rollout.Rotation
}

type planResult struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Exists    bool   `json:"exists"`
	// ChangedKeys are the keys whose value would change (added, removed or
	// modified), referenced or not.
	ChangedKeys     []string    `json:"changedKeys"`
	MetadataChanged bool        `json:"metadataChanged"`
	Workloads       []planEntry `json:"workloads"`
}

// planFor decides, for every workload of the namespace, whether applying next
// over live (nil: absent) rolls it. others are the namespace's other objects
// with a rollout selector; nsLabels and nsAnnotations read a namespace's.
func planFor(live, next *source, ws []workload, others []sourceMeta, nsLabels, nsAnnotations func(string) map[string]string) planResult {
	res := planResult{Kind: string(next.ref.Kind), Namespace: next.namespace, Name: next.ref.Name, Exists: live != nil, Workloads: []planEntry{}}
	liveSrc, nextSrc := live.stampSource(), next.stampSource()
	liveSrc.Ref, nextSrc.Ref = next.ref, next.ref
	liveSrc.Present = live != nil
	var liveAnn map[string]string
	if live != nil {
		liveAnn = live.annotations
	}
	res.ChangedKeys = changedKeys(live, next)
	res.MetadataChanged = live != nil && !maps.Equal(withoutLastApplied(liveAnn), withoutLastApplied(next.annotations))
	for _, w := range ws {
		if w.meta.Namespace != next.namespace {
			continue
		}
		// The same rule the apply-time warning webhook applies (sharedworkload.ChangeRolls).
		refsLive, selLive := sharedworkload.ReferencesTo(w.meta.Annotations, w.template, next.ref, liveAnn)
		refsNext, selNext := sharedworkload.ReferencesTo(w.meta.Annotations, w.template, next.ref, next.annotations)
		if refsLive.Len() == 0 && refsNext.Len() == 0 {
			continue
		}
		byOthers := false
		for _, s := range others {
			if s.namespace == w.meta.Namespace && s.ref != next.ref {
				if _, ok := w.selectedBy(s.annotations); ok {
					byOthers = true
				}
			}
		}
		managedLive, managedNext := sharedworkload.Handled(w.optedIn(nsLabels(w.meta.Namespace)), byOthers, selLive, selNext)
		e := planEntry{Kind: w.kind, Name: w.meta.Name}
		e.place.Priority, _ = rollout.Priority(w.meta.Annotations)
		e.place.Cost, e.idle = w.status.CanaryPods, w.status.Idle()
		wanted, _ := rollout.CanaryWanted(w.meta.Annotations, nsAnnotations(w.meta.Namespace), true)
		e.canaryOff = !wanted
		referenced := referencedKeys(refsNext.Keys(next.ref), refsLive.Keys(next.ref), res.ChangedKeys)
		switch {
		case !managedNext && !managedLive:
			e.Reason = "not opted in (" + stamp.LabelEnabled + ")"
		case !managedNext:
			e.Reason = "no longer matched by the rollout selector: configstamp stops handling it"
		case !managedLive:
			e.Reason = "newly matched by the rollout selector: configstamp records a baseline, nothing rolls"
		case sharedworkload.ChangeRolls(next.namespace, next.ref, refsLive, refsNext, liveSrc, nextSrc):
			e.Rolls = true
			e.Reason, e.Keys = rollReason(live, next, liveSrc, nextSrc, refsLive, refsNext, referenced)
			e.change = rollout.Change{Ref: next.ref, Content: sharedworkload.ChangeContent(next.namespace, next.ref, refsNext, nextSrc)}
			e.references = refsNext.Keys(next.ref)
			e.rotation = rotationOf(w)
			_, pinned := pin.Pinned(w.template)[next.ref]
			e.NewSnapshot = pinned && !nextSrc.Ignored // an ignored source is read directly again
		case nextSrc.Ignored && liveSrc.Ignored:
			e.Reason = "ignored (" + stamp.AnnotationIgnore + ")"
		case len(res.ChangedKeys) > 0:
			e.Reason = "only unreferenced keys change"
			e.Keys = res.ChangedKeys
		case res.MetadataChanged:
			e.Reason = "only metadata changes"
		default:
			e.Reason = "no change"
		}
		res.Workloads = append(res.Workloads, e)
	}
	markCanaries([]planResult{res})
	return res
}

// markCanaries marks, in the plans of the objects of one manifest, the
// canary of each change and what each other workload that rolls waits
// for, as the controller grants canaries (rollout.Canaries: per namespace
// and per change, the first in wave order, passing over workloads with
// configstamp.io/canary: "false" on them or their Namespace, which roll
// without waiting). A workload that references several objects of the
// manifest rolls their changes together, as one rollout.
func markCanaries(results []planResult) {
	var waiting []rollout.Waiting
	at := map[rollout.Key]int{}
	each := func(do func(k rollout.Key, e *planEntry)) {
		for r := range results {
			for i := range results[r].Workloads {
				if e := &results[r].Workloads[i]; e.Rolls && !e.canaryOff {
					do(rollout.Key{Kind: e.Kind, Namespace: results[r].Namespace, Name: e.Name}, e)
				}
			}
		}
	}
	each(func(k rollout.Key, e *planEntry) {
		i, ok := at[k]
		if !ok {
			i, at[k] = len(waiting), len(waiting)
			waiting = append(waiting, rollout.Waiting{Key: k, Place: e.place, Idle: e.idle})
		}
		waiting[i].Causes = append(waiting[i].Causes, e.change)
	})
	canaries := rollout.Canaries(waiting)
	canaryOf := map[rollout.Change]map[string]rollout.Key{} // per change, per namespace
	for k, changes := range canaries {
		for _, c := range changes {
			if canaryOf[c] == nil {
				canaryOf[c] = map[string]rollout.Key{}
			}
			canaryOf[c][k.Namespace] = k
		}
	}
	each(func(k rollout.Key, e *planEntry) {
		e.Canary, e.WaitsFor, e.CanaryPods = false, "", 0
		switch first, ok := canaryOf[e.change][k.Namespace]; {
		case first == k:
			e.Canary = true
			if e.place.Cost > 1 {
				e.CanaryPods = e.place.Cost
			}
		case ok:
			e.WaitsFor = strings.ToLower(first.Kind) + "/" + first.Name
		}
	})
}

func rollReason(live, next *source, liveSrc, nextSrc stamp.Source, refsLive, refsNext *stamp.Refs, keys []string) (string, []string) {
	switch {
	case live == nil:
		return "created: it was absent", nil
	case liveSrc.Ignored != nextSrc.Ignored && nextSrc.Ignored:
		return "now ignored (" + stamp.AnnotationIgnore + "): leaves the hash", nil
	case liveSrc.Ignored != nextSrc.Ignored:
		return "no longer ignored: enters the hash", nil
	case refsLive.Len() == 0:
		return "now referenced by its rollout selector", nil
	case refsNext.Len() == 0:
		return "no longer referenced by its rollout selector", nil
	case liveSrc.Combined || nextSrc.Combined:
		return fmt.Sprintf("data changes (more than %d keys: any change counts)", stamp.MaxKeyDigests), nil
	}
	return "referenced keys change", keys
}

// referencedKeys are the changed keys either key set references.
func referencedKeys(a, b stamp.KeySet, changed []string) []string {
	var out []string
	for _, k := range changed {
		_, inA := a.Keys[k]
		_, inB := b.Keys[k]
		if a.All || b.All || inA || inB {
			out = append(out, k)
		}
	}
	return out
}

// changedKeys are the keys added, removed or modified between live and next.
func changedKeys(live, next *source) []string {
	out := []string{}
	var old map[string][]byte
	if live != nil {
		old = live.data
	}
	for k, v := range next.data {
		if ov, ok := old[k]; !ok || string(ov) != string(v) {
			out = append(out, k)
		}
	}
	for k := range old {
		if _, ok := next.data[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func withoutLastApplied(a map[string]string) map[string]string {
	out := maps.Clone(a)
	delete(out, lastApplied)
	if len(out) == 0 {
		return nil
	}
	return out
}

// liveSource reads the object live (nil when absent). A Secret's data is read
// to compare it; it is never printed.
func (o *options) liveSource(ctx context.Context, ns string, ref stamp.ObjectRef) (*source, error) {
	var s *source
	var err error
	switch ref.Kind {
	case stamp.KindConfigMap:
		var cm *corev1.ConfigMap
		if cm, err = o.client.CoreV1().ConfigMaps(ns).Get(ctx, ref.Name, metav1.GetOptions{}); err == nil {
			s = fromConfigMap(cm)
		}
	case stamp.KindSecret:
		var sec *corev1.Secret
		if sec, err = o.client.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{}); err == nil {
			s = fromSecret(sec)
		}
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("while reading %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
	}
	return s, nil
}

// runPlan says, before a ConfigMap or Secret manifest is applied, which
// workloads its change would roll: read the manifest, plan each object, print.
func runPlan(ctx context.Context, o *options, _ []string) error {
	if o.filename == "" {
		return usagef("plan needs -f FILE (a ConfigMap or Secret manifest; - reads standard input)")
	}
	if o.allNamespaces {
		return usagef("plan works in the namespace of each object: -A does not apply")
	}
	files, skipped, err := o.readPlanFile()
	if err != nil {
		return err
	}
	if err := o.connect(); err != nil {
		return err
	}
	results, err := planFiles(ctx, o, files)
	if err != nil {
		return err
	}
	for _, s := range skipped {
		_, _ = fmt.Fprintf(o.errOut, "warning: %s skipped: plan reads ConfigMaps and Secrets\n", s)
	}
	spreads := planSpreads(results)
	nsl := &namespaceLabels{o: o}
	for i := range spreads {
		spreads[i].Rings = rings(ctx, nsl, spreads[i].Namespaces)
	}
	if done, err := o.machine(planOutput{Objects: results, AcrossNamespaces: spreads}); done {
		return err
	}
	for i, res := range results {
		if i > 0 {
			o.printf("\n")
		}
		printPlan(o, res)
	}
	for _, s := range spreads {
		printSpread(o, s)
	}
	return nil
}

// rings reads the ring of each namespace (rollout.LabelRing); one in no
// ring, or whose Namespace cannot be read, is left out.
func rings(ctx context.Context, nsl *namespaceLabels, namespaces []string) map[string]int {
	out := map[string]int{}
	for _, name := range namespaces {
		if ring, ok, _ := rollout.RingOf(nsl.get(ctx, name)); ok {
			out[name] = ring
		}
	}
	return out
}

// printSpread says how configstamp judges the change of an object of one
// name in several namespaces: on its own in each, or ring by ring.
func printSpread(o *options, s planSpread) {
	o.printf("\n%s/%s rolls workloads in %d namespaces (%s): ", s.Kind, s.Name, len(s.Namespaces), strings.Join(s.Namespaces, ", "))
	byRing := map[int][]string{}
	var alone []string
	for _, ns := range s.Namespaces {
		if ring, ok := s.Rings[ns]; ok {
			byRing[ring] = append(byRing[ring], ns)
		} else {
			alone = append(alone, ns)
		}
	}
	if len(byRing) == 0 {
		o.printf("configstamp judges a change in each namespace on its own, so a value their workloads reject costs up to one pod in each, "+
			"and a failed canary halts the change in its namespace only (label the Namespaces %s to judge it once, ring by ring)\n", rollout.LabelRing)
		return
	}
	var rings []string
	for _, ring := range slices.Sorted(maps.Keys(byRing)) {
		rings = append(rings, fmt.Sprintf("ring %d (%s)", ring, strings.Join(byRing[ring], ", ")))
	}
	o.printf("in rings %s, the lowest ring's canary judges a change once and each ring rolls after the one below completed; "+
		"a failure in ring 0 halts it in every ring", strings.Join(rings, ", "))
	if len(alone) > 0 {
		o.printf("; in no ring (%s), each namespace judges it on its own", strings.Join(alone, ", "))
	}
	o.printf("\n")
}

// planSpread is one object, by kind and name, that rolls workloads in more
// than one namespace of a plan: a platform's copies of one shared config,
// each a change of its own namespace with a canary of its own, or, in rings,
// judged once by the lowest ring's canary.
type planSpread struct {
	Kind       string   `json:"kind"`
	Name       string   `json:"name"`
	Namespaces []string `json:"namespaces"`
	// Rings: the ring of each namespace in one (configstamp.io/ring).
	Rings map[string]int `json:"rings,omitempty"`
}

// planSpreads are the plan's objects that roll workloads in more than one
// namespace, in the order of their first result.
func planSpreads(results []planResult) []planSpread {
	var out []planSpread
	at := map[[2]string]int{}
	for _, res := range results {
		if !slices.ContainsFunc(res.Workloads, func(e planEntry) bool { return e.Rolls }) {
			continue
		}
		key := [2]string{res.Kind, res.Name}
		i, ok := at[key]
		if !ok {
			i = len(out)
			at[key] = i
			out = append(out, planSpread{Kind: res.Kind, Name: res.Name})
		}
		if !slices.Contains(out[i].Namespaces, res.Namespace) {
			out[i].Namespaces = append(out[i].Namespaces, res.Namespace)
		}
	}
	return slices.DeleteFunc(out, func(s planSpread) bool { return len(s.Namespaces) < 2 })
}

// readPlanFile reads the ConfigMaps and Secrets of -f (- : standard input)
// and names what else it holds.
func (o *options) readPlanFile() ([]*source, []string, error) {
	var r io.Reader = os.Stdin
	if o.filename != "-" {
		f, err := os.Open(o.filename)
		if err != nil {
			return nil, nil, err
		}
		defer func() { _ = f.Close() }()
		r = f
	}
	files, skipped, err := readManifest(r)
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("%s holds no ConfigMap or Secret", o.filename)
	}
	return files, skipped, err
}

// planFiles plans each object against its live version and the workloads of
// its namespace.
func planFiles(ctx context.Context, o *options, files []*source) ([]planResult, error) {
	nsl := &namespaceLabels{o: o}
	results := []planResult{}
	for _, file := range files {
		if file.namespace == "" {
			file.namespace = o.defaultNamespace
		} else if o.namespace != "" && o.namespace != file.namespace {
			return nil, fmt.Errorf("the namespace from the provided object %q does not match the namespace %q", file.namespace, o.namespace)
		}
		live, err := o.liveSource(ctx, file.namespace, file.ref)
		if err != nil {
			return nil, err
		}
		next, err := applied(live, file)
		if err != nil {
			return nil, err
		}
		ws, err := o.listWorkloads(ctx, file.namespace)
		if err != nil {
			return nil, err
		}
		others, err := o.selectorSources(ctx, file.namespace)
		if err != nil {
			return nil, err
		}
		results = append(results, planFor(live, next, ws, others, func(ns string) map[string]string { return nsl.get(ctx, ns) },
			func(ns string) map[string]string { return nsl.annotations(ctx, ns) }))
	}
	markCanaries(results) // a workload of two of the objects rolls both changes at once
	markRotations(results)
	return results, nil
}

// rotationOf is w's rotate-together group (rollout.RotationOf), of the
// sources it references.
func rotationOf(w workload) rollout.Rotation {
	refs, _ := stamp.WorkloadReferences(w.meta.Annotations, pin.SourceSpec(w.template))
	referenced := map[stamp.ObjectRef]string{}
	for _, r := range refs {
		referenced[r.Ref] = ""
	}
	r, _ := rollout.RotationOf(w.meta.Annotations, referenced)
	return r
}

// markRotations says, of each workload that rolls a change of the manifest
// and names it in its rotate-together group, which members the manifest
// leaves unchanged: it waits for them (at most its group's wait).
func markRotations(results []planResult) {
	rolls := map[rollout.Key][]rollout.Change{}
	for _, r := range results {
		for _, e := range r.Workloads {
			if e.Rolls {
				k := rollout.Key{Kind: e.Kind, Namespace: r.Namespace, Name: e.Name}
				rolls[k] = append(rolls[k], e.change)
			}
		}
	}
	for r := range results {
		for i := range results[r].Workloads {
			e := &results[r].Workloads[i]
			if !e.Rolls {
				continue
			}
			missing := e.rotation.Missing(rolls[rollout.Key{Kind: e.Kind, Namespace: results[r].Namespace, Name: e.Name}])
			if len(missing) == 0 {
				continue
			}
			e.Reason += fmt.Sprintf("; it waits for the rest of its %s group, unchanged here (%s), at most %v", rollout.AnnotationRotateTogether,
				stamp.JoinRefs(missing), e.rotation.Wait)
		}
	}
}

// planCanaryLines name the canaries of the object's changes (none: nothing
// rolls): one line when one change rolls, else a line per change's canary
// with the keys it rolls and the workloads that wait for it.
func planCanaryLines(ws []planEntry) []string {
	return append(canaryLines(ws), unheldLines(ws)...)
}

// unheldLines say which canaries Kubernetes cannot hold at one new pod, and
// on how many pods each runs its change at once.
func unheldLines(ws []planEntry) []string {
	var out []string
	for _, e := range ws {
		if e.Canary && e.CanaryPods > 1 {
			out = append(out, fmt.Sprintf("  %s/%s cannot be held at one new pod: its canary runs the change on %d pods at once "+
				"(a Recreate Deployment replaces every pod; a DaemonSet replaces its pods that are not available); "+
				"at a %s no higher than theirs, workloads that can be held go first", strings.ToLower(e.Kind), e.Name, e.CanaryPods, rollout.AnnotationPriority))
		}
	}
	return out
}

// canaryLines name the canaries (planCanaryLines).
func canaryLines(ws []planEntry) []string {
	var off, canaries []string
	rolls := 0
	waiters := map[string][]string{}
	for _, e := range ws {
		if !e.Rolls {
			continue
		}
		rolls++
		switch ref := strings.ToLower(e.Kind) + "/" + e.Name; {
		case e.canaryOff:
			off = append(off, ref)
		case e.Canary:
			canaries = append(canaries, ref)
		case e.WaitsFor != "":
			waiters[e.WaitsFor] = append(waiters[e.WaitsFor], ref)
		}
	}
	switch {
	case len(canaries) == 1 && rolls == 1:
		return []string{"Canary: " + canaries[0] + " (the only workload that rolls: it gets the change on one new pod first, where it can be held)"}
	case len(canaries) == 1:
		return []string{"Canary: " + canaries[0] +
			" (first in the wave: it gets the change first, on one new pod where it can be held; the others that roll wait until it passes)"}
	case len(canaries) == 0 && len(off) == 0:
		return nil
	case len(canaries) == 0:
		return []string{"Canary: none (" + strings.Join(off, ", ") + ": " + rollout.AnnotationCanaryOpt + ": false)"}
	}
	out := []string{fmt.Sprintf("Canaries: %d, one per change (the workloads that roll reference different keys of it); "+
		"each gets its change first, on one new pod where it can be held, and the workloads that roll the same change wait until it passes:", len(canaries))}
	inWave := slices.Clone(ws)
	slices.SortStableFunc(inWave, func(a, b planEntry) int {
		return rollout.WaveOrder(rollout.Key{Kind: a.Kind, Name: a.Name}, a.place, rollout.Key{Kind: b.Kind, Name: b.Name}, b.place)
	})
	for _, e := range inWave {
		if !e.Canary {
			continue
		}
		ref := strings.ToLower(e.Kind) + "/" + e.Name
		line := "  " + ref + " (references " + referencesText(e.references) + ")"
		switch w := waiters[ref]; len(w) {
		case 0:
		case 1:
			line += ": " + w[0] + " waits for it"
		default:
			line += ": " + strings.Join(w, ", ") + " wait for it"
		}
		out = append(out, line)
	}
	if len(off) > 0 {
		they := "it rolls"
		if len(off) > 1 {
			they = "they roll"
		}
		out = append(out, "  none for "+strings.Join(off, ", ")+" ("+rollout.AnnotationCanaryOpt+": false): "+they+" without waiting")
	}
	return out
}

// referencesText names the keys a workload references of an object.
func referencesText(k stamp.KeySet) string {
	switch {
	case k.All:
		return "every key"
	case len(k.Keys) == 0:
		return "nothing now"
	}
	return strings.Join(k.Sorted(), ", ")
}

// printPlan prints one object's plan: a line, then the workloads.
func printPlan(o *options, res planResult) {
	rolls := 0
	for _, e := range res.Workloads {
		if e.Rolls {
			rolls++
		}
	}
	what := "changes keys: " + strings.Join(res.ChangedKeys, ", ")
	switch {
	case !res.Exists:
		what = "would be created"
	case len(res.ChangedKeys) == 0 && res.MetadataChanged:
		what = "changes metadata only"
	case len(res.ChangedKeys) == 0:
		what = "no change"
	}
	o.printf("%s %s/%s %s: %d workload(s) would roll, %d would not\n", res.Kind, res.Namespace, res.Name, what, rolls, len(res.Workloads)-rolls)
	for _, line := range planCanaryLines(res.Workloads) {
		o.printf("%s\n", line)
	}
	if len(res.Workloads) == 0 {
		return
	}
	rows := [][]cell{header("WORKLOAD", "ROLLS", "WHY")}
	for _, e := range res.Workloads {
		r := c("no")
		if e.Rolls {
			r = coloured("yes", yellow)
		}
		why := e.Reason
		if len(e.Keys) > 0 {
			why += ": " + strings.Join(e.Keys, ", ")
		}
		if e.NewSnapshot {
			why += " (pinned: onto a new snapshot)"
		}
		rows = append(rows, []cell{c(strings.ToLower(e.Kind) + "/" + e.Name), r, c(why)})
	}
	o.table(rows)
}
