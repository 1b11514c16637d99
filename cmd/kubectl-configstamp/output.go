package main

// The help of each command: what it prints and, for scripts, the fields of
// its -o json|yaml document. Those are the json tags of the result types
// (statusResult, whyResult, whoUsesResult, planOutput, resumeResult,
// versionResult); the names are stable: fields may be added, none renamed or
// removed. TestOutputFieldsDocumented checks that every field is named here,
// testdata/*.json holds the documents of a fixed cluster.

const whoUsesLong = `Every workload that references it, how (volume, projected, envFrom, keyRef,
extra, rollout-selector), which keys (*: all), whether it is opted in, and
whether a change of those keys rolls it. -o wide adds where (the volume,
container or annotation); -A looks in every namespace.

Output (-o json|yaml), one object:
  kind, name       the ConfigMap or Secret
  namespace        its namespace (absent with -A)
  workloads[]      the workloads that reference it:
    namespace, kind, name
    optedIn        it or its namespace carries configstamp.io/enabled
    rolls          a change of the referenced keys rolls it
    allKeys        it references every key; else keys[] lists them
    keys[]         the referenced keys (absent with allKeys)
    references[]   each way it references the object:
      via          volume, projected, envFrom, keyRef, extra or rollout-selector
      where        the volume, container, annotation or selector
      allKeys, keys[]  as above, for this reference`

const planLong = `What applying a ConfigMap/Secret manifest (-f FILE, "-" for standard input)
would roll, computed as client-side kubectl apply would change the live
object, before you apply it. Secret values are compared, never printed.

The Canary: line names the workload that would be the change's canary: it
gets the change first, held at one new pod for its verification window, and
the other workloads of the namespace that roll the same change wait until it
passes (unless the manager runs with --canary=false). A change is
key-precise: workloads that reference other keys of the object roll another
change of it, with a canary of its own; then a Canaries: line says how many,
and a line per canary names it, the keys it references and who waits for
it. The canaries are the controller's own choice (rollout.Canaries), across
every object of the file: a workload that references two of them rolls both
changes at once. A canary Kubernetes cannot hold at one new pod (a
Recreate Deployment, a DaemonSet whose pods are not all available) gets a
line saying on how many pods it runs the change at once. An object of one
name that rolls workloads in several
namespaces of the file (a platform's copies of one config) is a change in
each: a last line says so, since a value they reject then costs up to one
pod per namespace.

Output (-o json|yaml), one object:
  objects[]          one per ConfigMap or Secret of the file:
    kind, namespace, name
    exists           it exists (false: applying creates it)
    changedKeys[]    the keys added, removed or modified, referenced or not
    metadataChanged  its annotations change
    workloads[]      the workloads of its namespace that reference it:
      kind, name
      rolls          applying the manifest rolls it
      reason         why it rolls or not
      keys[]         the keys behind the verdict (names only)
      newSnapshot    it is pinned and rolls onto a new snapshot
      canary         it would be the canary of its change in the namespace
                     (the Canary: line): the first that rolls that change
                     in wave order (higher configstamp.io/rollout-priority
                     first, then name, then kind), passing over workloads
                     with configstamp.io/canary: "false" on them or their
                     Namespace; absent on the others
      waitsFor       the canary of its change it waits for (kind/name;
                     absent: it is a canary, has canaries off, or does not
                     roll)
      canaryPods     a canary Kubernetes cannot hold at one new pod (a
                     Recreate Deployment, a DaemonSet with pods not
                     available): the pods it runs the change on at once
  acrossNamespaces[] the objects of one kind and name that roll workloads
                     in more than one namespace: configstamp judges each
                     namespace's change on its own, with a canary each,
                     unless the namespaces are in rings
    kind, name
    namespaces[]     where it rolls workloads
    rings            the ring of each namespace in one (label
                     configstamp.io/ring): ring 0's canary judges the
                     change once, then each ring rolls in order`

const whyLong = `The workload's last configstamp rollout, from its annotations and events:
when, caused by which change (Kind/name@content), its state now, why it
failed, the halt it carries or waits on, and whether it is its change's
canary (the first workload of the change's wave in its namespace, held at
one new pod while it is judged; canaries are on unless the workload or its
Namespace has configstamp.io/canary: "false", or the manager runs with
--canary=false): for a canary that runs or failed, its pod (phase,
readiness, restarts), until when it is judged, and its verdict with the
reason. -o wide shows every event of the workload, not only
configstamp's.

Output (-o json|yaml), one object:
  namespace, kind, name
  optedIn          it or its namespace carries configstamp.io/enabled
  selectedBy[]     the objects whose rollout selector matches it (Kind/name)
  stamp            its configstamp.io/config-hash (absent: none)
  sources[]        the objects its last record names (Kind/name)
  state            none, rolling, verifying, completed, failed or idle
  started          when its last rollout started (RFC 3339; absent: none)
  verifyUntil      verifying: when its verification window ends
  failure          failed: why, from its latest RolloutFailed event
  causes[]         the changes its last rollout rolled:
    source         Kind/name
    content        the content id (keyed: reveals nothing of the data)
  halted[]         the changes it halts ({source, content})
  canary           its last rollout as its change's canary (the Canary:
                   line): running (no other workload of the namespace gets
                   the change before it passes), passed, failed (the change
                   is halted), or off (it or its Namespace has
                   configstamp.io/canary: "false"); absent: no canary
  canaryPassed     passed: when, from its CanaryPassed event (RFC 3339)
  canaryNotBefore  running, held at one new pod: the earliest it can pass,
                   its start plus the verification window (when known)
  held[]           the spec fields configstamp set to hold the canary at one
                   new pod (configstamp.io/rollout-hold); they stay while a
                   failed canary halts its change:
    path           e.g. spec.minReadySeconds, spec.strategy.rollingUpdate.maxSurge
    set            the value configstamp set (30, 1, 0)
    was            the value it puts back (absent: the field was unset)
  canaryPods[]     canary running or failed: the pods of its new revision,
                   oldest first, as configstamp's verification picks them
                   (the workload's own, stamped like its template); held at
                   one new pod, the first is the canary's pod (the Canary
                   pod: line; absent: none):
    name           the pod
    phase          Pending, Running, Succeeded, Failed
    ready          its Ready condition is True
    restarts       its containers' restarts, init containers included
    healthySince   Ready with no restart since then (RFC 3339; absent: not
                   Ready); a canary passes on its first pod's
    problem        the sign of failure configstamp sees on it (absent: none)
  canaryJudgedUntil  running: when it passes if its pods stay as they are
                   (the Judged until: line): held, its first pod's
                   healthySince plus the verification window (when known);
                   a whole workload, the end of its verification window
  canaryReason     the reason of its verdict (the Verdict: line): failed,
                   why (as failure); passed, how (its CanaryPassed event);
                   running, a sign of failure its pods show now, which fails
                   it at configstamp's next judgement; absent: none
  pinned[]         the snapshots it reads instead of its sources (Kind/source=snapshot)
  rolledBackTo     the stamp a user rolled it back to, while pinned to it
  undoTo           the stamp configstamp's undo returned it to, while the
                   undo's own rollout is followed (absent: none)
  waitingOn        the halt it waits on (absent: none):
    change         Kind/name@content
    haltedBy[]     the workloads halting it (kind/name; in a ring above 0,
                   "a workload of ring 0" when none of its namespace does)
    message        its RolloutHalted event
    eventTime      when (RFC 3339)
  rotation         its configstamp.io/rotate-together group (absent: none):
    members[]      its sources that change together (Kind/name)
    written[]      those written since its last rollout (their resourceVersion
                   is not the one it recorded): while some are and some are
                   not, configstamp waits for the rest
    wait           how long at most, from the first change
    unread         why a member's metadata could not be read (absent: read)
  ring             its namespace's ring (label configstamp.io/ring; absent:
                   none, or the Namespace cannot be read)
  summary          what it means now (the Now: line)
  events[]         its events, oldest first:
    type, reason, count
    lastSeen       RFC 3339
    from           the component that reported it
    message`

const statusLong = `Rollouts in flight, cluster-wide (-n narrows): the budget in use, the
workloads rolling or verifying (a change's canary reads "rolling (canary)"),
the halted workloads and who waits on them, the workloads a user rolled back,
and, for a source rolling or halted in namespaces labelled
configstamp.io/ring, how each ring stands.

Output (-o json|yaml), one object:
  budgetInUse      the workloads rolling or verifying (each holds a slot of
                   --max-concurrent-rollouts)
  rolling[]        those workloads:
    namespace, kind, name
    state          rolling or verifying
    started        RFC 3339 (absent: unknown)
    verifyUntil    verifying: when its verification window ends
    canary         running: it is its change's canary (the table says
                   "rolling (canary)"): no other workload of its namespace
                   gets the change before it passes; passed: it passed;
                   absent: no canary
    causes[]       {source, content}: the changes it rolls
  halted[]         the workloads that halt a failed change:
    namespace, kind, name
    changes[]      {source, content}
    waiting[]      the workloads waiting on it (kind/name)
  rolledBack[]     the pinned workloads a user rolled back:
    namespace, kind, name
    stamp          the stamp of the revision it runs
    pinned[]       Kind/source=snapshot
  rings[]          each source (Kind/name) rolling or halted in a ringed
                   namespace, judged once by the lowest ring's canary:
    source
    rings[]        its rings, lowest first; each counts the ring's workloads
                   by their last rollout of the source:
      ring, namespaces[]
      rolling, verifying, completed, halted
      canary       the ring's running canary (namespace/kind/name)
      lastStarted  RFC 3339: the ring's latest rollout of it`

const resumeLong = `Removes configstamp.io/halted from the workload (a JSON merge patch,
conditional on the resourceVersion read); the workloads waiting on the halt
roll within seconds, unless another workload still halts a change of the
same source.

Output (-o json|yaml), one object:
  namespace, kind, name
  lifted[]         the changes whose halt was lifted ({source, content})
  stillHaltedBy[]  the workloads still halting a change of the same sources`

const unholdLong = `For uninstalling configstamp, once its Deployment is deleted: on every
workload of the namespace (-A: of every namespace) that carries
configstamp.io/rollout-hold, puts back what configstamp set in its spec for
a canary (surge, unavailable, minReadySeconds, partition, spec.paused): each
field still at the value configstamp set gets back the value it had; a field
changed since stays as it is. The annotation goes in the same JSON merge
patch, conditional on the resourceVersion read. A configstamp still running
counts such a workload's record for nothing (its halt no longer holds).

Output (-o json|yaml), a list:
  namespace, kind, name
  putBack[]   the fields given back their value
  error       why it could not be put back (exit code 1)`

const versionLong = `The plugin's version and configstamp's: read from the manager Deployment
(GET deployments/configstamp-controller-manager in configstamp-system; the
"view" role allows it): its app.kubernetes.io/version label, that label on its
pod template, else the tag of the manager container's image. "unknown" when
the Deployment cannot be read or says no version. --client: the plugin's
only.

Output (-o json|yaml), one object:
  client
    version            the plugin's (devel: built without a version)
    goVersion
    platform           GOOS/GOARCH
  server               configstamp's (absent with --client):
    version            or unknown
    source             where version was read (label app.kubernetes.io/version,
                       pod template label app.kubernetes.io/version, image tag)
    namespace, deployment  the manager Deployment
    image              its manager container's image
    error              why it could not be read
  kubernetesVersion    the API server's gitVersion`

// planOutput is `plan -o json|yaml`: one result per object of the file.
type planOutput struct {
	Objects []planResult `json:"objects"`
	// AcrossNamespaces: the objects of one kind and name that roll
	// workloads in more than one namespace (planSpreads).
	AcrossNamespaces []planSpread `json:"acrossNamespaces,omitempty"`
}
