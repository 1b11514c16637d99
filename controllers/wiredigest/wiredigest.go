// Package wiredigest digests ConfigMaps and Secrets of more than
// stamp.MaxKeyDigests keys in the informer cache's watch streams, before
// client-go decodes them. The cache keeps only such an object's combined digest
// (stamp.DigestConfigMap), but to compute it the informer first decoded the
// whole object into maps: a tenant's ConfigMap of 100,000 short keys took about
// 1.3 MB on the wire and more than 8 MB of maps and key lists while it was
// digested. Here the combined digest is computed from the wire bytes, key by
// key in the order the API server writes them (sorted: its protobuf encoding
// sorts map keys), and the frame is replaced by the object's cached form,
// metadata and sum only, which stamp.DigestConfigMap then leaves as it is.
//
// Anything else passes through unchanged and takes the ordinary path: other
// kinds, objects up to the cap, JSON, LIST responses, and every frame this
// package does not fully understand (keys out of order or repeated, unknown
// fields, a content encoding).
package wiredigest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Config returns a copy of cfg whose watch streams of ConfigMaps and Secrets
// are digested on the wire, for the informer cache's HTTP client only: the
// objects they deliver carry the cache's digested form, not their data.
func Config(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(Wrap)
	return out
}

// Wrap wraps rt (see Config).
func Wrap(rt http.RoundTripper) http.RoundTripper { return roundTripper{next: rt} }

type roundTripper struct{ next http.RoundTripper }

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if kind := sourceWatch(req, resp); kind != "" {
		resp.Body = &rewriter{body: resp.Body, kind: kind}
	}
	return resp, nil
}

// sourceWatch returns "ConfigMap" or "Secret" when resp is a protobuf watch
// stream of that core kind, else "".
func sourceWatch(req *http.Request, resp *http.Response) string {
	if req.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
		return ""
	}
	if w := req.URL.Query().Get("watch"); w != "true" && w != "1" {
		return ""
	}
	media, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || media != runtime.ContentTypeProtobuf || params["stream"] != "watch" {
		return ""
	}
	// The core group's resources, behind whatever path prefix the server has:
	// .../api/v1/<resource> or .../api/v1/namespaces/<ns>/<resource>.
	path := strings.TrimSuffix(req.URL.Path, "/")
	i := strings.LastIndex(path, "/api/v1/")
	if i < 0 {
		return ""
	}
	segments := strings.Split(path[i+len("/api/v1/"):], "/")
	if len(segments) != 1 && (len(segments) != 3 || segments[0] != "namespaces") {
		return ""
	}
	switch segments[len(segments)-1] {
	case "configmaps":
		return "ConfigMap"
	case "secrets":
		return "Secret"
	}
	return ""
}

// maxFrame bounds the frames rewriter reads whole: client-go's watch decoder
// refuses larger ones (16 MiB). A larger frame passes through unread.
const maxFrame = 16 << 20

// exactFrame is the largest frame whose buffer is allocated as announced.
const exactFrame = 2 << 20

// keepBuffer is the largest frame buffer kept between frames; a larger one is
// dropped after its frame, so that one large object does not pin its size.
const keepBuffer = 64 << 10

// rewriter is a watch stream's body: length-prefixed frames of WatchEvents,
// each over-cap object's frame replaced by its digested form.
type rewriter struct {
	body  io.ReadCloser
	kind  string
	frame bytes.Buffer // the current frame, length prefix included
	out   []byte       // what is left to return of the current frame
	pass  int64        // bytes of an oversized frame left to pass through
}

func (r *rewriter) Read(p []byte) (int, error) {
	for len(r.out) == 0 && r.pass == 0 {
		if err := r.next(); err != nil {
			return 0, err
		}
	}
	if len(r.out) > 0 {
		n := copy(p, r.out)
		r.out = r.out[n:]
		return n, nil
	}
	if int64(len(p)) > r.pass {
		p = p[:r.pass]
	}
	n, err := r.body.Read(p)
	r.pass -= int64(n)
	if errors.Is(err, io.EOF) && r.pass > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (r *rewriter) Close() error { return r.body.Close() }

// next reads the next frame into out, rewritten if it is an over-cap source.
func (r *rewriter) next() error {
	if r.frame.Cap() > keepBuffer {
		r.frame = bytes.Buffer{}
	}
	r.frame.Reset()
	var head [4]byte
	if _, err := io.ReadFull(r.body, head[:]); err != nil {
		return err // io.EOF between frames is the stream's end
	}
	r.frame.Write(head[:])
	n := int64(binary.BigEndian.Uint32(head[:]))
	if n > maxFrame {
		r.out, r.pass = r.frame.Bytes(), n
		return nil
	}
	// Every object fits in etcd's 1.5 MiB request limit: up to exactFrame the
	// buffer is allocated once, as announced (doubling as the bytes arrive
	// would allocate twice the frame); beyond, it grows as the bytes arrive,
	// not to what the prefix alone announces.
	if n <= exactFrame {
		r.frame.Grow(int(n) + bytes.MinRead) // ReadFrom wants MinRead spare
	}
	if got, err := r.frame.ReadFrom(io.LimitReader(r.body, n)); got < n {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	r.out = r.frame.Bytes()
	if frame, ok := digestEvent(r.out[4:], r.kind); ok {
		r.out = frame
	}
	return nil
}

// take reads msg, a message whose fields are numbered 1 to len(last), all
// length-delimited but for field varint (0: none), which is a varint: each
// field's last value into last (its bytes; a varint's encoding) and, when
// counts is not nil, how many times it came. It reports false for a malformed
// message, an unexpected field or wire type. It allocates nothing: every frame
// of a watch passes through it.
func take(msg []byte, last [][]byte, counts []int, varint protowire.Number) bool {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 || num < 1 || int(num) > len(last) {
			return false
		}
		msg = msg[n:]
		switch {
		case num == varint && typ == protowire.VarintType:
			if n = protowire.ConsumeFieldValue(num, typ, msg); n >= 0 {
				last[num-1] = msg[:n]
			}
		case num != varint && typ == protowire.BytesType:
			last[num-1], n = protowire.ConsumeBytes(msg)
		default:
			return false
		}
		if n < 0 {
			return false
		}
		msg = msg[n:]
		if counts != nil {
			counts[num-1]++
		}
	}
	return true
}

// protobufMagic prefixes every object in Kubernetes' protobuf encoding.
var protobufMagic = []byte("k8s\x00")

// digestEvent returns the frame (length prefix included) to deliver instead of
// event, a WatchEvent whose object is an over-cap source of kind, and false for
// anything to pass through.
func digestEvent(event []byte, kind string) ([]byte, bool) {
	var ev, ext [2][]byte // WatchEvent: type = 1, object = 2 (RawExtension: raw = 1)
	if !take(event, ev[:], nil, 0) || !take(ev[1], ext[:1], nil, 0) || !bytes.HasPrefix(ext[0], protobufMagic) {
		return nil, false
	}
	// runtime.Unknown: typeMeta = 1 (apiVersion = 1, kind = 2), raw = 2,
	// contentEncoding = 3, contentType = 4.
	var unknown [4][]byte
	var typeMeta [2][]byte
	if !take(ext[0][len(protobufMagic):], unknown[:], nil, 0) || len(unknown[2]) != 0 || !take(unknown[0], typeMeta[:], nil, 0) ||
		string(typeMeta[0]) != "v1" || string(typeMeta[1]) != kind {
		return nil, false
	}
	object, ok := digestObject(unknown[1], kind)
	if !ok {
		return nil, false
	}
	body, err := (&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: kind}, Raw: object, ContentType: string(unknown[3])}).Marshal()
	if err != nil {
		return nil, false
	}
	out, err := (&metav1.WatchEvent{Type: string(ev[0]), Object: runtime.RawExtension{Raw: append(slices.Clip(protobufMagic), body...)}}).Marshal()
	if err != nil {
		return nil, false
	}
	return append(binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(out)), uint32(len(out))), out...), true
}

// Fields of ConfigMap and Secret, as indexes into take's slices (the field
// number less one; k8s.io/api/core/v1/generated.proto).
const (
	fieldMetadata        = 0
	fieldData            = 1
	fieldBinaryData      = 2 // ConfigMap
	fieldSecretType      = 2
	fieldImmutable       = 3 // ConfigMap
	fieldStringData      = 3 // Secret: write-only, never served
	fieldSecretImmutable = 4 // Secret
)

// digestObject returns the cached form of raw, a ConfigMap or Secret (kind) in
// protobuf, when it has more than stamp.MaxKeyDigests keys, and false for
// anything to pass through.
func digestObject(raw []byte, kind string) ([]byte, bool) {
	var f [5][]byte
	var counts [5]int
	streams, immutable := []protowire.Number{fieldData + 1, fieldBinaryData + 1}, fieldImmutable
	if kind == "Secret" {
		streams, immutable = streams[:1], fieldSecretImmutable
		if !take(raw, f[:5], counts[:5], fieldSecretImmutable+1) || counts[fieldStringData] > 0 {
			return nil, false
		}
	} else if !take(raw, f[:4], counts[:4], fieldImmutable+1) {
		return nil, false
	}
	keys := 0
	for _, num := range streams {
		keys += counts[num-1]
	}
	if keys <= stamp.MaxKeyDigests || counts[fieldMetadata] > 1 {
		return nil, false
	}
	sum, ok := combine(raw, streams)
	if !ok {
		return nil, false
	}
	var frozen *bool
	if f[immutable] != nil {
		v, _ := protowire.ConsumeVarint(f[immutable]) // take checked it
		frozen = ptr.To(v != 0)
	}
	objectMeta := metav1.ObjectMeta{}
	if err := objectMeta.Unmarshal(f[fieldMetadata]); err != nil {
		return nil, false
	}
	var obj interface {
		metav1.Object
		Marshal() ([]byte, error)
	} = &corev1.ConfigMap{ObjectMeta: objectMeta, Immutable: frozen}
	if kind == "Secret" {
		obj = &corev1.Secret{ObjectMeta: objectMeta, Type: corev1.SecretType(f[fieldSecretType]), Immutable: frozen}
	}
	stamp.Combined(obj, sum)
	out, err := obj.Marshal()
	return out, err == nil
}

// combine returns the combined digest (stamp.Combiner) of the map entries in
// the fields streams of msg, merged in key order, and false if a stream's
// keys are not strictly increasing or two streams share a key.
func combine(msg []byte, streams []protowire.Number) ([sha256.Size]byte, bool) {
	cursors := make([]cursor, len(streams))
	for i, num := range streams {
		cursors[i] = cursor{rest: msg, num: num}
		if !cursors[i].advance() {
			return [sha256.Size]byte{}, false
		}
	}
	c := stamp.NewCombiner()
	for {
		var next *cursor
		for i := range cursors {
			switch cur := &cursors[i]; {
			case cur.done:
			case next == nil || cur.key < next.key:
				next = cur
			case cur.key == next.key:
				return [sha256.Size]byte{}, false
			}
		}
		if next == nil {
			return c.Sum(), true
		}
		c.Add(next.key, next.value)
		if !next.advance() {
			return [sha256.Size]byte{}, false
		}
	}
}

// cursor walks the map entries of one field of a message take has accepted.
type cursor struct {
	rest    []byte
	num     protowire.Number
	key     string // aliases msg: valid while msg is
	value   []byte
	started bool
	done    bool
}

// advance moves to the next entry, or to done; false if the entry is malformed
// or its key is not greater than the one before.
func (c *cursor) advance() bool {
	for len(c.rest) > 0 {
		num, typ, n := protowire.ConsumeTag(c.rest)
		c.rest = c.rest[n:]
		n = protowire.ConsumeFieldValue(num, typ, c.rest)
		v := c.rest[:n]
		c.rest = c.rest[n:]
		if num != c.num {
			continue
		}
		entry, m := protowire.ConsumeBytes(v)
		var kv [2][]byte // MapEntry: key = 1, value = 2
		if m < 0 || !take(entry, kv[:], nil, 0) {
			return false
		}
		key := unsafe.String(unsafe.SliceData(kv[0]), len(kv[0]))
		if c.started && key <= c.key {
			return false
		}
		c.key, c.value, c.started = key, kv[1], true
		return true
	}
	c.done = true
	return true
}
