//go:build tools

// Package tools pins the Kubernetes control-plane binaries that the local
// control plane (hack/localcp) runs, and the real node's kubelet and
// kube-proxy. Built by `make controlplane` and `make realnode`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
