//go:build tools

// Package tools pins etcd for the local control plane. Built by `make controlplane`.
package tools

import _ "go.etcd.io/etcd/server/v3"
