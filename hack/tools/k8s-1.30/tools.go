//go:build tools

// Package tools pins the oldest Kubernetes the README promises (1.30): its
// kube-apiserver, kube-controller-manager and kube-scheduler, which
// `make test-compat` builds into bin/k8s-1.30 and runs test/e2e against.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
