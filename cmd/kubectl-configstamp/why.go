package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	cswl "github.com/configstamp/configstamp/controllers/workload"
)

// Event reasons configstamp emits on workloads (controllers package).
const (
	reasonRolloutHalted = "RolloutHalted"
	reasonRolloutFailed = "RolloutFailed"
	reasonCanaryPassed  = "CanaryPassed"
	reporter            = "configstamp"
)

// change is one rollout cause, Kind/name@content (the content id is keyed with
// the installation key: it tells versions apart and reveals nothing of the data).
type change struct {
	Source  string `json:"source"`
	Content string `json:"content"`
}

func changes(s string) []change {
	out := []change{}
	for _, ch := range rollout.ParseChanges(s) {
		out = append(out, change{Source: ch.Ref.String(), Content: ch.Content})
	}
	return out
}

func changesText(cs []change) string {
	var out []string
	for _, ch := range cs {
		out = append(out, ch.Source+"@"+ch.Content)
	}
	return strings.Join(out, ", ")
}

type eventView struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Count   int32     `json:"count"`
	Last    time.Time `json:"lastSeen"`
	From    string    `json:"from"`
	Message string    `json:"message"`
}

type whyResult struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	OptedIn   bool   `json:"optedIn"`
	// SelectedBy are the objects whose rollout selector matches the workload:
	// configstamp handles it, opted in or not.
	SelectedBy []string `json:"selectedBy"`
	Stamp      string   `json:"stamp,omitempty"`
	// Sources are the objects the last record names (configstamp.io/sources).
	Sources []string `json:"sources"`
	// State: none, rolling, verifying, completed, failed, idle.
	State   string     `json:"state"`
	Started *time.Time `json:"started,omitempty"`
	// VerifyUntil (verifying): the rollout is complete as `kubectl rollout
	// status` says and counts as completed if its new pods stay healthy until
	// then (configstamp.io/rollout-verify-until).
	VerifyUntil *time.Time `json:"verifyUntil,omitempty"`
	// Failure (failed): why, from the workload's latest RolloutFailed event
	// (its message after "failed: ", without what configstamp does next):
	// "it failed verification: pod web-7d4f9-x2k8q: container app restarted 2
	// times (exit code 1, Error), CrashLoopBackOff", "it was not complete
	// within the progress deadline of 10m0s". Empty when no such event is left
	// (events expire, an hour by default).
	Failure string   `json:"failure,omitempty"`
	Causes  []change `json:"causes"`
	Halted  []change `json:"halted"`
	// Canary is how the last rollout stands as its change's canary
	// (configstamp.io/rollout-canary and its state): running, passed,
	// failed (the canary failed: the change is halted), or off (the
	// workload or its Namespace has configstamp.io/canary: "false"); absent
	// when it was no canary and canaries are not off for it.
	Canary string `json:"canary,omitempty"`
	// CanaryPassed: when its canary passed, from its latest CanaryPassed
	// event since the rollout started (absent: none left).
	CanaryPassed *time.Time `json:"canaryPassed,omitempty"`
	// CanaryNotBefore (running, held at one new pod): the earliest its
	// canary can pass, the rollout's start plus its verification window,
	// when the window is known (configstamp.io/verify-window, or the
	// minReadySeconds the hold set).
	CanaryNotBefore *time.Time `json:"canaryNotBefore,omitempty"`
	// Held are the spec fields configstamp set to hold the canary at one
	// new pod (configstamp.io/rollout-hold), with the values to put back.
	Held []heldField `json:"held"`
	// CanaryPods (canary running or failed): the pods of its new revision,
	// oldest first, as configstamp's verification picks them (the pods of
	// the workload's own controller stamped like its template); held at one
	// new pod, the first is the canary's pod.
	CanaryPods []canaryPod `json:"canaryPods,omitempty"`
	// CanaryJudgedUntil (running): when the canary passes if its pods stay
	// as they are: held, its first pod's healthy start plus the verification
	// window (when known, as for canaryNotBefore); a whole workload, the end
	// of its verification window.
	CanaryJudgedUntil *time.Time `json:"canaryJudgedUntil,omitempty"`
	// CanaryReason: why the canary stands as it does: failed, why it failed
	// (as failure); passed, how (its CanaryPassed event); running, a sign
	// of failure its pods show now, which fails it at configstamp's next
	// judgement (absent: none).
	CanaryReason string `json:"canaryReason,omitempty"`
	// canaryPodsUnread: why its pods could not be read ("": read).
	canaryPodsUnread string
	// Pinned are the snapshots the template mounts and reads instead of its
	// sources (pinned config): "Kind/source=snapshot".
	Pinned []string `json:"pinned"`
	// RolledBackTo is the stamp of the earlier revision a user rolled the
	// pinned workload back to, while it runs that revision.
	RolledBackTo string `json:"rolledBackTo,omitempty"`
	// UndoTo is the stamp of the revision configstamp's undo returned the
	// failed workload to, while the undo's own rollout is followed.
	UndoTo    string   `json:"undoTo,omitempty"`
	WaitingOn *waiting `json:"waitingOn,omitempty"`
	// Rotation: its configstamp.io/rotate-together group, and which of it
	// was written since its last stamp (absent: no group).
	Rotation *rotationView `json:"rotation,omitempty"`
	// Ring: its namespace's ring (configstamp.io/ring; absent: none, or
	// its Namespace cannot be read).
	Ring    *int        `json:"ring,omitempty"`
	Summary string      `json:"summary"`
	Events  []eventView `json:"events"`
}

// heldField is one field of a canary's hold: where, the value configstamp
// set, and the one it puts back ("" : the field was absent, the API's
// default).
type heldField struct {
	Path string `json:"path"`
	Set  string `json:"set"`
	Was  string `json:"was,omitempty"`
}

func (h heldField) String() string {
	return h.Path + "=" + h.Set + " (was: " + cmp.Or(h.Was, "unset") + ")"
}

// heldFields reads a record's hold; an unreadable one is none.
func heldFields(hold string) []heldField {
	out := []heldField{}
	h, err := cswl.DecodeHold(hold)
	if err != nil {
		return out
	}
	for _, f := range h {
		out = append(out, heldField{Path: f.Path, Set: jsonText(f.Set), Was: jsonText(f.Was)})
	}
	return out
}

// jsonText is a hold's value as text: 30, 1, 25% ("" for none).
func jsonText(v any) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(raw)
}

func heldText(held []heldField) string {
	out := make([]string, len(held))
	for i, h := range held {
		out[i] = h.String()
	}
	return strings.Join(out, ", ")
}

// canaryOf is how rec stands as its change's canary (see whyResult.Canary);
// off says that the workload or its Namespace turned canaries off.
func canaryOf(rec rollout.Record, off bool) string {
	switch {
	case rec.Canary == rollout.CanaryPassed:
		return "passed"
	case rec.Canary == rollout.CanaryRunning && rec.State == rollout.Failed:
		return "failed"
	case rec.Canary == rollout.CanaryRunning && rec.State == rollout.Completed:
		return "passed" // a whole workload was the canary: it passed by completing
	case rec.Canary == rollout.CanaryRunning && rec.Open():
		return "running"
	case off:
		return "off"
	}
	return ""
}

// canaryPassedAt is when the canary of rec passed, from the latest
// CanaryPassed event configstamp emitted since the rollout started.
func canaryPassedAt(rec rollout.Record, events []eventView) *time.Time {
	if e := latestEvent(rec, events, reasonCanaryPassed); e != nil {
		return utcOrNil(e.Last)
	}
	return nil
}

// latestEvent is the latest event of reason configstamp emitted on the
// workload since rec's rollout started (nil: none left).
func latestEvent(rec rollout.Record, events []eventView, reason string) *eventView {
	for i := len(events) - 1; i >= 0; i-- {
		if e := &events[i]; e.Reason == reason && e.From == reporter && (rec.Started.IsZero() || !e.Last.Before(rec.Started)) {
			return e
		}
	}
	return nil
}

// verifyWindow is the workload's verification window when the plugin can
// tell: its configstamp.io/verify-window, else the minReadySeconds its hold
// raised to the window and cswl.LateReadyMargin (false: --verify-window,
// which the plugin cannot see). A hold cut to a Deployment's progress
// deadline (a window within the margin of it) reads up to the margin short.
func verifyWindow(annotations map[string]string, held []heldField) (time.Duration, bool) {
	if d, err := time.ParseDuration(strings.TrimSpace(annotations[rollout.AnnotationVerifyWindow])); err == nil && d >= 0 {
		return d, true
	}
	for _, h := range held {
		if h.Path == "spec.minReadySeconds" {
			if n, err := strconv.Atoi(h.Set); err == nil {
				return max(0, time.Duration(n)*time.Second-cswl.LateReadyMargin), true
			}
		}
	}
	return 0, false
}

// waiting: the workload's latest word is a RolloutHalted event on a change that
// some workload still halts.
type waiting struct {
	Change    string    `json:"change"`
	HaltedBy  []string  `json:"haltedBy"`
	Message   string    `json:"message"`
	EventTime time.Time `json:"eventTime"`
}

// events lists the events of an object (core/v1 view, which also shows the
// events.k8s.io events configstamp records), oldest first.
func (o *options) events(ctx context.Context, ns string, uid string) ([]eventView, error) {
	list, err := o.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", uid).String()})
	if err != nil {
		return nil, fmt.Errorf("while listing events: %w", err)
	}
	out := make([]eventView, 0, len(list.Items))
	for _, e := range list.Items {
		if string(e.InvolvedObject.UID) == uid {
			out = append(out, view(&e))
		}
	}
	slices.SortStableFunc(out, func(a, b eventView) int {
		return cmp.Or(a.Last.Compare(b.Last), cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Message, b.Message))
	})
	return out, nil
}

func view(e *corev1.Event) eventView {
	// The most precise time first: events.k8s.io events carry microseconds.
	last := e.EventTime.Time
	if e.Series != nil && !e.Series.LastObservedTime.IsZero() {
		last = e.Series.LastObservedTime.Time
	}
	if last.IsZero() {
		last = e.LastTimestamp.Time
	}
	if last.IsZero() {
		last = e.FirstTimestamp.Time
	}
	count := e.Count
	if e.Series != nil && e.Series.Count > count {
		count = e.Series.Count
	}
	from := cmp.Or(e.ReportingController, e.Source.Component)
	return eventView{Type: e.Type, Reason: e.Reason, Count: max(count, 1), Last: last.UTC(), From: from, Message: e.Message}
}

// runWhy explains one workload: read what configstamp wrote on it and about
// it, then print it.
func runWhy(ctx context.Context, o *options, args []string) error {
	w, ns, err := o.oneWorkload(ctx, args[0], "why reads")
	if err != nil {
		return err
	}
	res, err := explain(ctx, o, w, ns)
	if err != nil {
		return err
	}
	if done, err := o.machine(res); done {
		return err
	}
	printWhy(o, w, ns, res)
	printWhyEvents(o, res.Events)
	return nil
}

// explain reads w's stamp, record, sources, selectors, events and the halt it
// may wait on.
func explain(ctx context.Context, o *options, w workload, ns string) (whyResult, error) {
	nsl := &namespaceLabels{o: o}
	rec := rollout.Read(w.meta.Annotations)
	res := whyResult{Namespace: ns, Kind: w.kind, Name: w.meta.Name, OptedIn: w.optedIn(nsl.get(ctx, ns)),
		Stamp: w.template.Annotations[stamp.AnnotationHash], Sources: []string{},
		State: cmp.Or(string(rec.State), "none"), Causes: changes(rec.Cause), Halted: changes(rec.Halted)}
	for ref := range stamp.ParseSources(w.meta.Annotations[stamp.AnnotationSources]) {
		res.Sources = append(res.Sources, ref.String())
	}
	slices.Sort(res.Sources)
	res.Pinned = []string{}
	for src, snap := range pin.Pinned(w.template) {
		res.Pinned = append(res.Pinned, src.String()+"="+snap)
	}
	slices.Sort(res.Pinned)
	if pin.RolledBack(w.meta.Annotations, w.template) {
		res.RolledBackTo = res.Stamp
	}
	if rec.Open() {
		res.UndoTo = rec.Undo
	}
	selectors, err := o.selectorSources(ctx, ns)
	if err != nil {
		return res, err
	}
	res.SelectedBy = []string{}
	for _, src := range selectors {
		if _, ok := w.selectedBy(src.annotations); ok {
			res.SelectedBy = append(res.SelectedBy, src.ref.String())
		}
	}
	res.Started = utcOrNil(rec.Started)
	if rec.State == rollout.Verifying {
		res.VerifyUntil = utcOrNil(rec.Until)
	}
	if res.Events, err = o.events(ctx, ns, string(w.meta.UID)); err != nil {
		return res, err
	}
	if rec.State == rollout.Failed {
		res.Failure = failureOf(rec, res.Events)
	}
	wanted, _ := rollout.CanaryWanted(w.meta.Annotations, nsl.annotations(ctx, ns), true)
	res.Canary = canaryOf(rec, !wanted)
	res.Held = heldFields(rec.Hold)
	if res.Canary == "passed" {
		res.CanaryPassed = canaryPassedAt(rec, res.Events)
	}
	if res.Canary == "running" && len(res.Held) > 0 && !rec.Started.IsZero() {
		if window, ok := verifyWindow(w.meta.Annotations, res.Held); ok {
			res.CanaryNotBefore = utcOrNil(rec.Started.Add(window))
		}
	}
	view := o.canaryOfWhy(ctx, w, ns, rec, res)
	res.CanaryPods, res.CanaryJudgedUntil, res.CanaryReason, res.canaryPodsUnread = view.pods, view.judgedUntil, view.reason, view.podsUnread
	if ring, ok, _ := rollout.RingOf(nsl.get(ctx, ns)); ok {
		res.Ring = &ring
	}
	if res.WaitingOn, err = o.waitingOn(ctx, ns, res.Ring, rec, res.Events); err != nil {
		return res, err
	}
	if res.Rotation, err = o.rotation(ctx, w, ns); err != nil {
		return res, err
	}
	res.Summary = summary(res)
	return res, nil
}

// printWhy prints the explanation's table.
func printWhy(o *options, w workload, ns string, res whyResult) {
	stateColour := map[string]string{"rolling": yellow, "verifying": yellow, "completed": green, "failed": red}[res.State]
	rows := [][]cell{
		{c(w.kind + ":"), c(ns + "/" + w.meta.Name)},
		{c("Opted in:"), c(optedInText(res))},
		{c("Stamp:"), c(cmp.Or(res.Stamp, "none"))},
		{c("Sources:"), c(cmp.Or(strings.Join(res.Sources, ", "), "none recorded"))},
	}
	if res.Started != nil {
		rows = append(rows, []cell{c("Last rollout:"), c("started " + res.Started.Format(time.RFC3339))})
	} else {
		rows = append(rows, []cell{c("Last rollout:"), c("none started by configstamp")})
	}
	if len(res.Causes) > 0 {
		rows = append(rows, []cell{c("Caused by:"), c(changesText(res.Causes))})
	}
	if len(res.Pinned) > 0 {
		rows = append(rows, []cell{c("Pinned to:"), c(strings.Join(res.Pinned, ", "))})
	}
	rows = append(rows, []cell{c("State:"), coloured(res.State, stateColour)})
	if res.VerifyUntil != nil {
		rows = append(rows, []cell{c("Verifying until:"), coloured(untilText(*res.VerifyUntil, o.clock()), yellow)})
	}
	switch {
	case res.Failure != "":
		rows = append(rows, []cell{c("Failure:"), coloured(res.Failure, red)})
	case res.State == string(rollout.Failed):
		rows = append(rows, []cell{c("Failure:"), c("no RolloutFailed event left (events expire)")})
	}
	if text, colour := canaryText(res, o.clock()); text != "" {
		rows = append(rows, []cell{c("Canary:"), coloured(text, colour)})
		rows = append(rows, canaryRows(res, o.clock())...)
	}
	if len(res.Halted) > 0 {
		rows = append(rows, []cell{c("Halts:"), coloured(changesText(res.Halted), red)})
	}
	if res.WaitingOn != nil {
		rows = append(rows, []cell{c("Waiting on:"), coloured(res.WaitingOn.Change+", halted by "+strings.Join(res.WaitingOn.HaltedBy, ", "), red)})
	}
	if res.Rotation != nil {
		rows = append(rows, []cell{c("Rotates together:"), c(res.Rotation.text())})
	}
	if res.Ring != nil {
		rows = append(rows, []cell{c("Ring:"), c(ringText(*res.Ring))})
	}
	rows = append(rows, []cell{c("Now:"), c(res.Summary)})
	o.table(rows)
}

// canaryText is the Canary: row ("" : none) and its colour.
func canaryText(r whyResult, now time.Time) (string, string) {
	const off = "off (" + rollout.AnnotationCanaryOpt + ": false)"
	switch r.Canary {
	case "running":
		if len(r.Held) == 0 {
			return "running: the whole workload is the canary, judged until its rollout completes and is verified; " +
				"no other workload of the namespace gets the change before it passes", yellow
		}
		text := "running: one new pod first, judged for its verification window; " +
			"no other workload of the namespace gets the change before it passes"
		if r.CanaryNotBefore != nil {
			text += ", not before " + untilText(*r.CanaryNotBefore, now)
		}
		return text + "; held: " + heldText(r.Held), yellow
	case "passed":
		text := "passed"
		if r.CanaryPassed != nil {
			text += " at " + r.CanaryPassed.Format(time.RFC3339)
		}
		return text, green
	case "failed":
		switch {
		case len(r.Held) > 0:
			return "failed: the change is halted; the hold stays (" + heldText(r.Held) + ") so no second pod runs it", red
		case len(r.Halted) > 0:
			return "failed: the change is halted; no other workload of the namespace got it", red
		}
		return "failed; its halt was lifted", red
	case "off":
		return off, ""
	}
	return "", ""
}

// printWhyEvents prints configstamp's events about the workload (every
// event with -o wide).
func printWhyEvents(o *options, events []eventView) {
	shown := events
	if !o.wide() {
		shown = nil
		for _, e := range events {
			if e.From == reporter {
				shown = append(shown, e)
			}
		}
	}
	what := "Events from configstamp"
	if o.wide() {
		what = "Events"
	}
	if len(shown) == 0 {
		o.printf("\n%s: none.\n", what)
		return
	}
	o.printf("\n%s:\n", what)
	erows := [][]cell{header("LAST SEEN", "TYPE", "REASON", "COUNT", "MESSAGE")}
	if o.wide() {
		erows[0] = header("LAST SEEN", "TYPE", "REASON", "COUNT", "FROM", "MESSAGE")
	}
	for _, e := range shown {
		typ := c(e.Type)
		if e.Type == corev1.EventTypeWarning {
			typ = coloured(e.Type, red)
		}
		row := []cell{c(e.Last.Format(time.RFC3339)), typ, c(e.Reason), c(fmt.Sprint(e.Count))}
		if o.wide() {
			row = append(row, c(e.From))
		}
		erows = append(erows, append(row, c(e.Message)))
	}
	o.table(erows)
}

// failureOf is why rec's rollout failed, from the latest RolloutFailed event
// configstamp emitted on the workload since the rollout started: the message
// ("rollout for CAUSES failed: REASON; configstamp halts ...") between
// "failed: " and "; configstamp". "" when there is none.
func failureOf(rec rollout.Record, events []eventView) string {
	return eventReason(rec, events, reasonRolloutFailed, " failed: ", "; configstamp")
}

// eventReason is the part of the latest event of reason configstamp
// emitted since rec's rollout started (latestEvent) between after and the
// last until: its whole message without after, "" without such an event.
func eventReason(rec rollout.Record, events []eventView, reason, after, until string) string {
	e := latestEvent(rec, events, reason)
	if e == nil {
		return ""
	}
	_, text, ok := strings.Cut(e.Message, after)
	if !ok {
		return e.Message
	}
	if i := strings.LastIndex(text, until); i >= 0 {
		text = text[:i]
	}
	return text
}

// failedVerification reports a failure in the verification window (after
// the rollout was complete as `kubectl rollout status` says).
func failedVerification(failure string) bool {
	return strings.HasPrefix(failure, "it failed verification")
}

// waitingOn finds a halt the workload waits on: its latest configstamp event
// is RolloutHalted (after its last rollout started) and some workload of the
// namespace still carries that change in configstamp.io/halted.
// ringText is the Ring: row of a workload in ring.
func ringText(ring int) string {
	if ring == 0 {
		return "0: its canary judges a change of a source copied into the rings above, and its halts hold them"
	}
	return fmt.Sprintf("%d: a change of a source copied into lower rings waits for them, and a canary of it there that began "+
		"with the change (at most the ring settle before it was seen) and passed after it was seen judges it; a halt of it in ring 0 holds it", ring)
}

// ringZero names the workload of ring 0 that holds a waiter of a ring above.
const ringZero = "a workload of ring 0"

// haltedInRing0 is the waiting of a workload of a ring above 0 told of a
// halted change no workload of its namespace holds: a workload of ring 0
// holds it (its name, in another namespace, is not the waiter's to see).
func haltedInRing0(last *eventView) *waiting {
	const before, after = "the change ", " failed"
	i := strings.Index(last.Message, before)
	j := strings.Index(last.Message, after)
	if i < 0 || j < i+len(before) {
		return nil
	}
	return &waiting{Change: last.Message[i+len(before) : j], Message: last.Message, EventTime: last.Last, HaltedBy: []string{ringZero}}
}

func (o *options) waitingOn(ctx context.Context, ns string, ring *int, rec rollout.Record, events []eventView) (*waiting, error) {
	var last *eventView
	for i := range events {
		if events[i].From == reporter {
			last = &events[i]
		}
	}
	if last == nil || last.Reason != reasonRolloutHalted || (!rec.Started.IsZero() && last.Last.Before(rec.Started)) {
		return nil, nil
	}
	ws, err := o.listWorkloads(ctx, ns)
	if err != nil {
		return nil, err
	}
	// The event names one halt; every workload halting a change of the same
	// source holds the waiter too (a halt's content is what that workload
	// references, so the ids may differ).
	var out *waiting
	var source string
	for _, w := range ws {
		for _, ch := range changes(w.meta.Annotations[rollout.AnnotationHalted]) {
			if text := ch.Source + "@" + ch.Content; strings.Contains(last.Message, text) {
				out = &waiting{Change: text, Message: last.Message, EventTime: last.Last}
				source = ch.Source
			}
		}
		if out != nil {
			break
		}
	}
	if out == nil && ring != nil && *ring > 0 {
		return haltedInRing0(last), nil
	}
	if out == nil {
		return nil, nil
	}
	for _, w := range ws {
		if slices.ContainsFunc(changes(w.meta.Annotations[rollout.AnnotationHalted]), func(c change) bool { return c.Source == source }) {
			out.HaltedBy = append(out.HaltedBy, w.ref())
		}
	}
	return out, nil
}

// rotationView is a workload's configstamp.io/rotate-together group: its
// members, those written since its last stamp (their resourceVersion is
// not the one the stamp recorded, configstamp.io/source-versions), and how
// long a change of some waits for the rest.
type rotationView struct {
	Members []string `json:"members"`
	Written []string `json:"written"`
	Wait    string   `json:"wait"`
	// Unread: why a member's metadata could not be read ("": read).
	Unread string `json:"unread,omitempty"`
}

// rotation reads w's rotate-together group and its members' metadata.
func (o *options) rotation(ctx context.Context, w workload, ns string) (*rotationView, error) {
	r := rotationOf(w)
	if len(r.Members) == 0 {
		return nil, nil
	}
	recorded := stamp.ParseVersions(w.meta.Annotations[stamp.AnnotationSourceVersions])
	v := &rotationView{Written: []string{}, Wait: r.Wait.String()}
	for _, m := range r.Members {
		v.Members = append(v.Members, m.String())
		meta, err := o.sourceMetadata(ctx, ns, m)
		switch {
		case err != nil:
			v.Unread = err.Error()
		case meta == nil || meta.ResourceVersion != recorded[m]: // written, or deleted, since
			v.Written = append(v.Written, m.String())
		}
	}
	return v, nil
}

// text is the Rotates together: row.
func (v *rotationView) text() string {
	group := strings.Join(v.Members, ", ")
	switch {
	case v.Unread != "":
		return group + " (not read: " + v.Unread + ")"
	case len(v.Written) == 0:
		return group + ": none written since its last rollout"
	case len(v.Written) == len(v.Members):
		return group + ": all written since its last rollout, which rolls them together"
	}
	var rest []string
	for _, m := range v.Members {
		if !slices.Contains(v.Written, m) {
			rest = append(rest, m)
		}
	}
	return fmt.Sprintf("%s: %s written since its last rollout; it waits for %s, at most %s from the first change", group,
		strings.Join(v.Written, ", "), strings.Join(rest, ", "), v.Wait)
}

func summary(r whyResult) string {
	switch {
	case r.UndoTo != "":
		return "undoing: its rollout failed and configstamp returned it to its last verified revision (stamp " + r.UndoTo + "); " +
			"that rollout is followed like any other (it holds a slot until it passes its verification window or fails: " +
			"a failure is reported, never undone again), and the change stays halted"
	case r.RolledBackTo != "":
		return "rolled back by a user to the revision stamped " + r.RolledBackTo + ", pinned to " + strings.Join(r.Pinned, ", ") +
			"; configstamp keeps it until a source changes"
	case r.WaitingOn != nil && r.WaitingOn.HaltedBy[0] == ringZero:
		return "waiting: the change " + r.WaitingOn.Change + " failed on " + ringZero +
			"; it rolls once that halt is lifted there (a fix of ring 0's copy, or a resume by whoever runs ring 0)"
	case r.WaitingOn != nil && len(r.WaitingOn.HaltedBy) > 1:
		return "waiting: the change " + r.WaitingOn.Change + " failed on " + strings.Join(r.WaitingOn.HaltedBy, ", ") +
			"; it rolls once every one of these halts is lifted (kubectl configstamp resume on each)"
	case r.WaitingOn != nil:
		return "waiting: the change " + r.WaitingOn.Change + " failed on " + r.WaitingOn.HaltedBy[0] +
			"; it rolls once that halt is lifted (kubectl configstamp resume " + r.WaitingOn.HaltedBy[0] + ")"
	case r.State == "rolling":
		return "rolling: holds a slot of the budget until the rollout completes and stays healthy through its verification window (--verify-window), " +
			"or fails at --progress-deadline or in that window (its slot is given back with its halt)"
	case r.State == "verifying":
		until := "the end of its window"
		if r.VerifyUntil != nil {
			until = r.VerifyUntil.Format(time.RFC3339)
		}
		return "verifying: complete as kubectl rollout status says; it counts as completed if every pod of the new revision stays Ready, " +
			"with no container restarting, until " + until + ". It holds its slot of the budget until then; " +
			"a restart, a crash or a lost readiness fails it (and halts its change)"
	case r.State == "failed" && failedVerification(r.Failure) && len(r.Halted) > 0:
		return "failed in verification: it was complete, then a pod of the new revision crashed or lost its readiness (see Failure; " +
			"kubectl describe pod, kubectl logs --previous). That change is halted on every other workload until it changes again, " +
			"this workload is complete with no pod crashing, or kubectl configstamp resume " + strings.ToLower(r.Kind) + "/" + r.Name
	case r.State == "failed" && failedVerification(r.Failure):
		return "failed in verification: it was complete, then a pod of the new revision crashed or lost its readiness (see Failure); no halt in force"
	case r.State == "failed" && len(r.Halted) > 0:
		return "failed and halting that change on every other workload; lift with kubectl configstamp resume " +
			strings.ToLower(r.Kind) + "/" + r.Name
	case r.State == "failed":
		return "failed; no halt in force"
	case r.State == "completed":
		return "completed"
	case r.State == "idle":
		return "idle: stamped while it could make no pod of the change (paused, no replicas, OnDelete, a partition that holds every pod); " +
			"judged from when it makes one"
	case !r.OptedIn && len(r.SelectedBy) == 0:
		return "not opted in: configstamp stamps it only if a rollout selector matches it"
	}
	return "no rollout started by configstamp yet"
}

func optedInText(r whyResult) string {
	if len(r.SelectedBy) == 0 {
		return yesNo(r.OptedIn)
	}
	return yesNo(r.OptedIn) + " (matched by the rollout selector of " + strings.Join(r.SelectedBy, ", ") + ")"
}
