package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// configstampUserAgent is the prefix of configstamp's client user agent
// (cmd/main.go sets it to "configstamp").
const configstampUserAgent = "configstamp"

// auditEvent is the part of an audit.k8s.io/v1 Event that the counts need.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	UserAgent  string `json:"userAgent"`
	RequestURI string `json:"requestURI"`
	ObjectRef  *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// key is "verb resource[/subresource]"; a WATCH that streams the initial list
// (sendInitialEvents=true) is "watchlist"; non-resource requests use the path.
func (ev *auditEvent) key() string {
	verb := ev.Verb
	if verb == "watch" && strings.Contains(ev.RequestURI, "sendInitialEvents=true") {
		verb = "watchlist"
	}
	what, _, _ := strings.Cut(ev.RequestURI, "?")
	if ev.ObjectRef != nil && ev.ObjectRef.Resource != "" {
		what = ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			what += "/" + ev.ObjectRef.Subresource
		}
	}
	return verb + " " + what
}

// auditLog reads kube-apiserver's JSON audit log incrementally and keeps
// configstamp's completed requests.
type auditLog struct {
	path    string
	offset  int64
	events  []auditEvent        // configstamp's, stage ResponseComplete
	started map[string]struct{} // configstamp's long-running requests not yet complete
	markers map[string]struct{}
}

func newAuditLog(path string) *auditLog {
	return &auditLog{path: path, started: map[string]struct{}{}, markers: map[string]struct{}{}}
}

var (
	configstampField = []byte(`"userAgent":"` + configstampUserAgent)
	markerPrefix     = []byte("stampbench-marker-")
)

// readNew consumes the complete lines appended since the last call.
func (a *auditLog) readNew() error {
	f, err := os.Open(a.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(a.offset, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil // a partial last line is read again next time
		}
		if err != nil {
			return err
		}
		a.offset += int64(len(line))
		if bytes.Contains(line, configstampField) {
			var ev auditEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				return fmt.Errorf("audit log line at %d: %w", a.offset, err)
			}
			switch ev.Stage {
			case "ResponseStarted":
				a.started[ev.AuditID] = struct{}{}
			case "ResponseComplete":
				delete(a.started, ev.AuditID)
				a.events = append(a.events, ev)
			}
		} else if bytes.Contains(line, markerPrefix) {
			var ev auditEvent
			if err := json.Unmarshal(line, &ev); err == nil && ev.Stage == "ResponseComplete" && ev.ObjectRef != nil {
				a.markers[ev.ObjectRef.Name] = struct{}{}
			}
		}
	}
}

// readUntil reads until the marker request named marker has been logged.
func (a *auditLog) readUntil(ctx context.Context, marker string) error {
	return poll(ctx, "audit marker "+marker, 30*time.Second, 50*time.Millisecond, func() (bool, string, error) {
		if err := a.readNew(); err != nil {
			return false, "", err
		}
		_, ok := a.markers[marker]
		return ok, fmt.Sprintf("read %d bytes", a.offset), nil
	})
}

// open is the number of configstamp's long-running requests (watches) logged as
// started but not yet as complete.
func (a *auditLog) open() int { return len(a.started) }

type requestCount struct {
	key string
	n   int
}

// count returns configstamp's completed requests received in [from, to), by
// verb and resource, most frequent first.
func (a *auditLog) count(from, to time.Time) []requestCount {
	byKey := map[string]int{}
	for i := range a.events {
		ev := &a.events[i]
		if t := ev.RequestReceivedTimestamp; !t.Before(from) && t.Before(to) {
			byKey[ev.key()]++
		}
	}
	out := make([]requestCount, 0, len(byKey))
	for k, n := range byKey {
		out = append(out, requestCount{k, n})
	}
	slices.SortFunc(out, func(x, y requestCount) int {
		return cmp.Or(cmp.Compare(y.n, x.n), cmp.Compare(x.key, y.key))
	})
	return out
}

// window is a named time span whose configstamp requests are counted.
type window struct {
	name     string
	from, to time.Time
	per      int    // counts are also shown per this many units, when set
	unit     string // e.g. "Deployment"
}
