#!/usr/bin/env bash
# Builds cert-manager's trust-manager controller of one release from its Go
# module, through the Go module proxy, as hack/argo-rollouts.sh builds Argo's:
# with the module's own go.mod, in a writable copy, outside configstamp's
# module. test/trust runs it.
#
#   hack/trust-manager.sh v0.25.0 bin/trust-manager-v0.25.0
set -euo pipefail
version=$1
out=$(realpath -m "$2")
module=github.com/cert-manager/trust-manager
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
"$(dirname "$0")/module-copy.sh" "$module@$version" "$tmp/src"
echo "building the controller of $module@$version (a minute or two on 2 cores the first time)" >&2
mkdir -p "$(dirname "$out")"
cd "$tmp/src"
GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out" ./cmd/trust-manager
