package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// canaryPod is a pod of a canary's new revision as why shows it: what
// configstamp's verification reads of it (rollout.InspectPods).
type canaryPod struct {
	Name     string `json:"name"`
	Phase    string `json:"phase"`
	Ready    bool   `json:"ready"`
	Restarts int32  `json:"restarts"`
	// HealthySince: Ready, with no container restarted, since then
	// (absent: not Ready). The canary passes on its first pod's.
	HealthySince *time.Time `json:"healthySince,omitempty"`
	// Problem: the sign of failure configstamp's verification sees on it
	// (absent: none).
	Problem string `json:"problem,omitempty"`
}

func (p canaryPod) String() string {
	text := p.Name + " " + cmp.Or(p.Phase, "Pending")
	switch {
	case p.HealthySince != nil:
		text += ", Ready since " + p.HealthySince.Format(time.RFC3339)
	case p.Ready:
		text += ", Ready"
	default:
		text += ", not Ready"
	}
	text += fmt.Sprintf(", %d restart", p.Restarts)
	if p.Restarts != 1 {
		text += "s"
	}
	if p.Problem != "" {
		text += ": " + p.Problem
	}
	return text
}

// canaryView is what why adds for a canary that runs or failed: its pods,
// until when it is judged, and why it stands as it does.
type canaryView struct {
	pods        []canaryPod
	podsUnread  string // why the pods could not be read ("" : read)
	judgedUntil *time.Time
	reason      string
}

// canaryPods reads the pods of w's new revision as the controller's
// verification picks them: the pods of the template's labels whose
// controller is w (rollout.OwnPods), stamped like its template
// (rollout.OfRevision), oldest first. v is what InspectPods makes of them.
func (o *options) canaryPods(ctx context.Context, w workload, ns string, rec rollout.Record) ([]canaryPod, rollout.Verification, error) {
	var v rollout.Verification
	if w.template == nil || len(w.template.Labels) == 0 {
		return nil, v, nil
	}
	list, err := o.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(w.template.Labels).String()})
	if err != nil {
		return nil, v, err
	}
	hash := w.template.Annotations[stamp.AnnotationHash]
	var pods []corev1.Pod
	for _, p := range rollout.OwnPods(&w.meta, list.Items) {
		if rollout.OfRevision(&p, hash) {
			pods = append(pods, p)
		}
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	seen := func(pods ...corev1.Pod) rollout.Verification {
		s := rollout.PodsSeen{Rule: rollout.RuleRolling, Pods: pods, Hash: hash, Started: rec.Started, Now: o.clock()}
		if rec.State == rollout.Verifying {
			s.Rule = rollout.RuleVerifying
		}
		return rollout.InspectPods(s)
	}
	out := make([]canaryPod, 0, len(pods))
	for _, p := range pods {
		one := seen(p)
		cp := canaryPod{Name: p.Name, Phase: string(p.Status.Phase), HealthySince: utcOrNil(one.FirstHealthySince)}
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			cp.Restarts += cs.RestartCount
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady {
				cp.Ready = cond.Status == corev1.ConditionTrue
			}
		}
		if rec.State != rollout.Failed { // a failed canary's pods are judged no more
			cp.Problem = strings.TrimPrefix(one.Problem, "pod "+p.Name+": ")
		}
		out = append(out, cp)
	}
	return out, seen(pods...), nil
}

// canaryOfWhy fills what why says of res's canary beyond its state: for a
// canary that runs or failed, the pods of its new revision; until when a
// running one is judged (held at one pod: its first pod's healthy start
// plus the verification window, rollout.CanaryJudgedUntil; a whole workload:
// the end of its verification window); and the reason of its verdict.
func (o *options) canaryOfWhy(ctx context.Context, w workload, ns string, rec rollout.Record, res whyResult) canaryView {
	var view canaryView
	switch res.Canary {
	case "passed":
		view.reason = passedReason(rec, res.Events)
		return view
	case "running", "failed":
	default:
		return view
	}
	pods, v, err := o.canaryPods(ctx, w, ns, rec)
	if err != nil {
		view.podsUnread = err.Error()
	}
	view.pods = pods
	if res.Canary == "failed" {
		view.reason = res.Failure
		return view
	}
	if v.Problem != "" {
		view.reason = "failing: " + v.Problem + " (configstamp fails it when it next judges it)"
	}
	switch {
	case len(res.Held) == 0:
		view.judgedUntil = res.VerifyUntil
	case v.Problem == "":
		if window, ok := verifyWindow(w.meta.Annotations, res.Held); ok {
			if until, ok := rollout.CanaryJudgedUntil(v, window); ok {
				view.judgedUntil = utcOrNil(until)
			}
		}
	}
	return view
}

// passedReason is how rec's canary passed: from its CanaryPassed event
// ("its first new pod stayed healthy for 30s"), or, a whole workload being
// the canary, by completing.
func passedReason(rec rollout.Record, events []eventView) string {
	if rec.Canary == rollout.CanaryRunning && rec.State == rollout.Completed {
		return "its whole rollout completed and was verified"
	}
	return eventReason(rec, events, reasonCanaryPassed, " passed: ", "; the rest")
}

// canaryRows are why's rows under Canary: its pods, until when it is
// judged, and its verdict.
func canaryRows(res whyResult, now time.Time) [][]cell {
	var rows [][]cell
	if res.Canary != "running" && res.Canary != "failed" && res.Canary != "passed" {
		return nil
	}
	label := "Canary pod:"
	if len(res.CanaryPods) > 1 {
		label = "Canary pods:"
	}
	for i, p := range res.CanaryPods {
		colour := ""
		if p.Problem != "" {
			colour = red
		}
		rows = append(rows, []cell{c(label), coloured(p.String(), colour)})
		if i == 0 {
			label = ""
		}
	}
	switch {
	case res.canaryPodsUnread != "":
		rows = append(rows, []cell{c(label), coloured("its pods could not be read: "+res.canaryPodsUnread, red)})
	case len(res.CanaryPods) == 0 && res.Canary != "passed":
		rows = append(rows, []cell{c(label), c("none of the new revision yet")})
	}
	switch {
	case res.CanaryJudgedUntil != nil:
		rows = append(rows, []cell{c("Judged until:"), coloured(untilText(*res.CanaryJudgedUntil, now), yellow)})
	case res.Canary == "running" && len(res.Held) > 0 && res.CanaryReason == "":
		rows = append(rows, []cell{c("Judged until:"), c("its verification window after its first pod is Ready")})
	case res.Canary == "running" && res.CanaryReason == "":
		rows = append(rows, []cell{c("Judged until:"), c("the end of its verification window, once its rollout is complete")})
	}
	verdict, colour := res.Canary, map[string]string{"running": yellow, "passed": green, "failed": red}[res.Canary]
	if res.CanaryReason != "" {
		verdict += ": " + res.CanaryReason
	}
	if strings.HasPrefix(res.CanaryReason, "failing") {
		colour = red
	}
	return append(rows, []cell{c("Verdict:"), coloured(verdict, colour)})
}
