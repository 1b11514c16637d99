package wiredigest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	goruntime "runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// frame is one watch event of obj as kube-apiserver writes it in protobuf.
func frame(t *testing.T, typ watch.EventType, obj runtime.Object) []byte {
	t.Helper()
	var raw bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &raw); err != nil {
		t.Fatal(err)
	}
	return eventFrame(t, typ, raw.Bytes())
}

func eventFrame(t *testing.T, typ watch.EventType, raw []byte) []byte {
	t.Helper()
	ev, err := (&metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(ev))), ev...)
}

// withObjectFields is frame of obj with fields put before its own.
func withObjectFields(t *testing.T, obj runtime.Object, fields []byte) []byte {
	t.Helper()
	var raw bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &raw); err != nil {
		t.Fatal(err)
	}
	unknown := runtime.Unknown{}
	if err := unknown.Unmarshal(raw.Bytes()[len(protobufMagic):]); err != nil {
		t.Fatal(err)
	}
	unknown.Raw = append(bytes.Clone(fields), unknown.Raw...)
	body, err := unknown.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return eventFrame(t, watch.Added, append(bytes.Clone(protobufMagic), body...))
}

func keys(n int, value string) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		out[fmt.Sprintf("k%06d", i)] = value + fmt.Sprint(i%10)
	}
	return out
}

func configMap(name string, data map[string]string, binaryData map[string][]byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name, ResourceVersion: "7", UID: types.UID("u-" + name),
			Labels: map[string]string{"app": name}, Annotations: map[string]string{"note": "x"}},
		Data: data, BinaryData: binaryData, Immutable: ptr.To(true)}
}

// watchThrough serves frames as a watch of kind's resource and returns the
// objects a client-go clientset decodes from it, through Wrap when wrap.
func watchThrough(t *testing.T, resource string, wrap bool, frames ...[]byte) []runtime.Object {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/tenant/"+resource || r.URL.Query().Get("watch") != "true" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
		for _, f := range frames {
			_, _ = w.Write(f)
		}
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf}}
	if wrap {
		cfg = Config(cfg)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	var w watch.Interface
	var err error
	if resource == "secrets" {
		w, err = cs.CoreV1().Secrets("tenant").Watch(t.Context(), metav1.ListOptions{})
	} else {
		w, err = cs.CoreV1().ConfigMaps("tenant").Watch(t.Context(), metav1.ListOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var out []runtime.Object
	deadline := time.After(10 * time.Second)
	for range frames {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Error {
				t.Fatalf("watch error: %v", ev.Object)
			}
			out = append(out, ev.Object)
		case <-deadline:
			t.Fatalf("timed out after %d of %d events", len(out), len(frames))
		}
	}
	return out
}

// TestOverCapSourcesArriveDigested: a ConfigMap or Secret of more than
// stamp.MaxKeyDigests keys reaches the cache's decoder as its cached form,
// exactly what stamp.DigestConfigMap/DigestSecret make of the whole object,
// with the same Source; anything up to the cap arrives whole.
func TestOverCapSourcesArriveDigested(t *testing.T) {
	over := configMap("over", keys(300, "v"), map[string][]byte{"b000001": {0, 1}, "k000005x": {2}})
	under := configMap("under", keys(stamp.MaxKeyDigests, "v"), nil)
	got := watchThrough(t, "configmaps", true, frame(t, watch.Added, over), frame(t, watch.Modified, under))

	want := over.DeepCopy()
	stamp.DigestConfigMap(want)
	cm := got[0].(*corev1.ConfigMap)
	cm.TypeMeta = want.TypeMeta // the decoder's business, not the cache's form
	if !reflect.DeepEqual(cm, want) {
		t.Errorf("over-cap ConfigMap arrived as\n%#v\nwant DigestConfigMap's\n%#v", cm, want)
	}
	if g, w := stamp.SourceFromConfigMap(cm), stamp.SourceFromConfigMap(over); !reflect.DeepEqual(g, w) || !g.Combined {
		t.Errorf("Source of the arrived object %+v, of the whole one %+v", g, w)
	}
	if u := got[1].(*corev1.ConfigMap); !reflect.DeepEqual(u.Data, under.Data) {
		t.Errorf("a ConfigMap of %d keys did not arrive whole: %d keys", stamp.MaxKeyDigests, len(u.Data))
	}

	secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "s", ResourceVersion: "9"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	for k, v := range keys(400, "secret") {
		secret.Data[k] = []byte(v)
	}
	s := watchThrough(t, "secrets", true, frame(t, watch.Added, secret))[0].(*corev1.Secret)
	wantSecret := secret.DeepCopy()
	stamp.DigestSecret(wantSecret)
	s.TypeMeta = wantSecret.TypeMeta
	if !reflect.DeepEqual(s, wantSecret) {
		t.Errorf("over-cap Secret arrived as\n%#v\nwant DigestSecret's\n%#v", s, wantSecret)
	}
}

// TestUnwrappedWatchIsWhole is the control: without Wrap the same stream
// delivers the whole object (what the test above would see unfixed).
func TestUnwrappedWatchIsWhole(t *testing.T) {
	over := configMap("over", keys(300, "v"), nil)
	if cm := watchThrough(t, "configmaps", false, frame(t, watch.Added, over))[0].(*corev1.ConfigMap); len(cm.Data) != 300 {
		t.Fatalf("unwrapped: %d keys, want 300", len(cm.Data))
	}
}

// TestDigestedFrameIsSmall: a tenant's ConfigMap of 100,000 keys (1.3 MB on
// the wire) becomes a frame of its metadata and one sum.
func TestDigestedFrameIsSmall(t *testing.T) {
	f := frame(t, watch.Added, configMap("many", keys(100000, ""), nil))
	out, ok := digestEvent(f[4:], "ConfigMap")
	if !ok || len(out) > 1024 {
		t.Fatalf("digested: %v, frame of %d bytes (from %d), want at most 1 KiB", ok, len(out), len(f))
	}
}

// TestAnythingElsePassesThrough: frames this package does not fully
// understand are delivered byte for byte, and the whole object is decoded
// (the cache's transform digests it as before).
func TestAnythingElsePassesThrough(t *testing.T) {
	var raw bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(configMap("x", nil, nil), &raw); err != nil {
		t.Fatal(err)
	}
	// A ConfigMap of 300 keys written out of order: the wire gives no order to rely on.
	var unordered []byte
	for i := 299; i >= 0; i-- {
		var entry []byte
		entry = protowire.AppendTag(entry, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, fmt.Sprintf("k%06d", i))
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendString(entry, "v")
		unordered = protowire.AppendTag(unordered, fieldData+1, protowire.BytesType) // data
		unordered = protowire.AppendBytes(unordered, entry)
	}
	unknown := runtime.Unknown{}
	if err := unknown.Unmarshal(raw.Bytes()[len(protobufMagic):]); err != nil {
		t.Fatal(err)
	}
	unknown.Raw = append(unknown.Raw, unordered...)
	body, err := unknown.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	repeated := configMap("dup", keys(300, "v"), map[string][]byte{"k000001": {1}}) // a key in data and binaryData
	// A second metadata before the real one: protobuf merges them, so the
	// object is ignored; the wire digest must not drop that.
	ignoreMeta, err := (&metav1.ObjectMeta{Annotations: map[string]string{stamp.AnnotationIgnore: "true"}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"keys out of order":            eventFrame(t, watch.Added, append(bytes.Clone(protobufMagic), body...)),
		"a key in data and binaryData": frame(t, watch.Added, repeated),
		"another kind":                 frame(t, watch.Added, &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}}),
		"a repeated metadata": withObjectFields(t, configMap("m", keys(300, "v"), nil),
			protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), ignoreMeta)),
		"data as a varint": withObjectFields(t, configMap("d", keys(300, "v"), nil),
			protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 0)),
		"immutable as bytes": withObjectFields(t, configMap("i", keys(300, "v"), nil),
			protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), []byte{1})),
	}
	for name, f := range cases {
		if _, ok := digestEvent(f[4:], "ConfigMap"); ok {
			t.Errorf("%s: rewritten", name)
		}
		var stream bytes.Buffer
		if _, err := io.Copy(&stream, iotest.OneByteReader(&rewriter{body: io.NopCloser(bytes.NewReader(f)), kind: "ConfigMap"})); err != nil || !bytes.Equal(stream.Bytes(), f) {
			t.Errorf("%s: not passed through byte for byte (%v)", name, err)
		}
	}
	got := watchThrough(t, "configmaps", true, cases["keys out of order"])[0].(*corev1.ConfigMap)
	if len(got.Data) != 300 {
		t.Errorf("out-of-order ConfigMap: %d keys decoded, want the whole 300", len(got.Data))
	}
}

// TestPassingThroughAllocatesNothing: every ConfigMap and Secret of a watch
// is looked at; those up to the cap (nearly all) cost no allocation here.
func TestPassingThroughAllocatesNothing(t *testing.T) {
	f := frame(t, watch.Modified, configMap("app", keys(10, strings.Repeat("v", 1000)), nil))
	if allocs := testing.AllocsPerRun(100, func() { digestEvent(f[4:], "ConfigMap") }); allocs != 0 {
		t.Errorf("%v allocations to pass a ConfigMap of 10 keys through, want 0", allocs)
	}
}

// TestAtTheCap: 256 keys pass through, 257 are digested; for Secrets too,
// with the Source a whole Secret gives.
func TestAtTheCap(t *testing.T) {
	for _, n := range []int{stamp.MaxKeyDigests, stamp.MaxKeyDigests + 1} {
		secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "s"}, Type: "example.com/x", Data: map[string][]byte{}}
		for k, v := range keys(n-1, "") {
			secret.Data[k] = []byte(v)
		}
		secret.Data["empty"] = nil // a value field left out on the wire
		// data and binaryData together: n keys, one with an empty value.
		cms := []runtime.Object{configMap("c", keys(n-2, ""), map[string][]byte{"bin": {1}, "zzz": nil}), secret}
		for i, resource := range []string{"configmaps", "secrets"} {
			got := watchThrough(t, resource, true, frame(t, watch.Added, cms[i]))[0]
			var source, whole stamp.Source
			if i == 0 {
				source, whole = stamp.SourceFromConfigMap(got.(*corev1.ConfigMap)), stamp.SourceFromConfigMap(cms[i].(*corev1.ConfigMap))
			} else {
				source, whole = stamp.SourceFromSecret(got.(*corev1.Secret)), stamp.SourceFromSecret(secret)
			}
			digested := got.(metav1.Object).GetAnnotations()[stamp.AnnotationDigested] != ""
			if digested != (n > stamp.MaxKeyDigests) || !reflect.DeepEqual(source, whole) {
				t.Errorf("%s of %d keys: arrived digested %v; same Source as the whole object: %v", resource, n, digested, reflect.DeepEqual(source, whole))
			}
		}
	}
}

// TestStreamEdges: frames cut short end the stream with an error, a frame
// larger than client-go accepts passes through unread, and a length prefix
// alone does not allocate what it announces.
func TestStreamEdges(t *testing.T) {
	f := frame(t, watch.Added, configMap("over", keys(300, "v"), nil))
	if _, err := io.ReadAll(&rewriter{body: io.NopCloser(bytes.NewReader(f[:len(f)-1])), kind: "ConfigMap"}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a frame cut short: %v, want %v", err, io.ErrUnexpectedEOF)
	}
	huge := binary.BigEndian.AppendUint32(nil, maxFrame+1)
	huge = append(huge, make([]byte, maxFrame+1)...)
	var out bytes.Buffer
	if _, err := io.Copy(&out, &rewriter{body: io.NopCloser(bytes.NewReader(huge)), kind: "ConfigMap"}); err != nil || !bytes.Equal(out.Bytes(), huge) {
		t.Errorf("an oversized frame: not passed through (%v)", err)
	}
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	_, err := io.ReadAll(&rewriter{body: io.NopCloser(bytes.NewReader(binary.BigEndian.AppendUint32(nil, maxFrame))), kind: "ConfigMap"})
	goruntime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) || after.TotalAlloc-before.TotalAlloc > 1<<20 {
		t.Errorf("a lone prefix announcing %d bytes: %v, %d bytes allocated", maxFrame, err, after.TotalAlloc-before.TotalAlloc)
	}
}

func TestSourceWatchPaths(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/tenant/configmaps":                  "ConfigMap",
		"/api/v1/secrets":                                       "Secret",
		"/k8s/clusters/c-1/api/v1/namespaces/tenant/configmaps": "ConfigMap",
		"/api/v1/namespaces/tenant/configmaps/one":              "",
		"/apis/example.com/v1/namespaces/tenant/configmaps":     "",
		"/api/v1/namespaces/tenant/pods":                        "",
	} {
		req := httptest.NewRequest(http.MethodGet, path+"?watch=true", nil)
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/vnd.kubernetes.protobuf;stream=watch"}}}
		if got := sourceWatch(req, resp); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}
