package stamp

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// AnnotationSourceVersions (workload metadata): the resourceVersion of every
// referenced source as seen by whoever wrote the stamp, or VersionAbsent. It
// lets the webhook accept the reconciler's patch without re-reading the
// sources, and lets the reconciler notice that its cache lags behind a stamp
// the webhook wrote from a live read.
const AnnotationSourceVersions = "configstamp.io/source-versions"

// VersionAbsent is the version of a referenced object that does not exist.
const VersionAbsent = "absent"

// FormatVersions renders "ConfigMap/a=123,Secret/b=absent", sorted.
func FormatVersions(m map[ObjectRef]string) string {
	refs := make([]ObjectRef, 0, len(m))
	for r := range m {
		refs = append(refs, r)
	}
	slices.SortFunc(refs, compareRefs)
	parts := make([]string, len(refs))
	for i, r := range refs {
		parts[i] = r.String() + "=" + m[r]
	}
	return strings.Join(parts, ",")
}

// ParseVersions is the tolerant inverse of FormatVersions.
func ParseVersions(s string) map[ObjectRef]string {
	out := map[ObjectRef]string{}
	for _, item := range strings.Split(s, ",") {
		name, version, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || version == "" {
			continue
		}
		ref, err := ParseObjectRef(name)
		if err != nil {
			continue
		}
		out[ref] = version
	}
	return out
}

// CompareVersions compares the versions a new computation saw (proposed)
// with those recorded with the current stamp. stale: some source was seen at
// an older resourceVersion than recorded (a lagging cache). uncertain: some
// source cannot be ordered (it exists on one side only, or a version does not
// parse); only a live read can tell. Sources recorded on one side only count
// as neither: they are new or no longer referenced.
func CompareVersions(recorded, proposed map[ObjectRef]string) (stale, uncertain bool) {
	for ref, rec := range recorded {
		prop, ok := proposed[ref]
		if !ok {
			continue
		}
		older, unsure := Older(prop, rec)
		stale, uncertain = stale || older, uncertain || unsure
	}
	return stale, uncertain
}

// Older compares one source's version seen now with the one recorded: older
// when seen precedes recorded, uncertain when the two cannot be ordered (one
// side absent, or a version that does not parse).
func Older(seen, recorded string) (older, uncertain bool) {
	switch {
	case recorded == VersionAbsent && seen == VersionAbsent:
		return false, false
	case recorded == VersionAbsent || seen == VersionAbsent:
		return false, true
	}
	c, err := resourceversion.CompareResourceVersion(seen, recorded)
	if err != nil {
		return false, true
	}
	return c < 0, false
}
