// Package manifests tests what ships configstamp into a cluster: the config/
// kustomize overlays, the generated RBAC, the hand-written webhook manifest and
// the Dockerfile.
//
// The tests render the overlays with `kubectl kustomize` and check the wiring
// between the objects (names, namespaces, ports, certificates), the Deployment's
// arguments against the binary's flags, the RBAC against an exact table of
// grants, config/webhook/manifests.yaml against
// webhook.Configuration(), config/rbac/role.yaml against a fresh controller-gen
// run, and finally apply both overlays with a server-side dry run to a real
// kube-apiserver (test/localcp) with cert-manager's CRDs installed.
//
// Needs kubectl, bin/controller-gen (`make controller-gen`), and bin/etcd and
// bin/kube-apiserver (`make controlplane`). `go test -short` skips the dry run.
package manifests
